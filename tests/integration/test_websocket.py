"""A websocket client receives the candidate events the worker publishes for a run."""

import json
import re

import pytest
from websockets.sync.client import connect

from swarm.goals import default_goal
from tests.integration.stack import Browserless


@pytest.mark.timeout(180)
def test_the_run_websocket_streams_evaluated_candidates(stack, demo_user):
    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small")
    session = Browserless(stack)
    session.login(*demo_user)
    url = session.post(f"/goals/{goal.pk}/runs/", {"budget": 3, "batch_size": 3, "seed": 5}, form_page=f"/goals/{goal.pk}/")
    run_id = int(re.search(r"/runs/(\d+)/", url).group(1))
    ws_url = stack.replace("http://", "ws://") + f"/ws/runs/{run_id}/"
    headers = {"Cookie": f"sessionid={session.cookie('sessionid')}", "Origin": stack}
    evaluated = {}
    with connect(ws_url, additional_headers=headers, open_timeout=10) as ws:
        snapshot = json.loads(ws.recv(timeout=10))
        assert snapshot["event"] == "snapshot" and snapshot["data"]["run"]["id"] == run_id
        for c in snapshot["data"]["candidates"]:
            if c["status"] not in ("queued", "running"):
                evaluated[c["id"]] = c
        while len(evaluated) < 3:
            msg = json.loads(ws.recv(timeout=120))
            if msg["event"] == "candidate" and msg["data"]["status"] not in ("queued", "running"):
                evaluated[msg["data"]["id"]] = msg["data"]
    assert any(c["status"] == "ok" and c["metrics"]["latency_ms"] > 0 for c in evaluated.values())


def test_the_websocket_refuses_anonymous_clients(stack, transactional_db):
    ws_url = stack.replace("http://", "ws://") + "/ws/runs/1/"
    with pytest.raises(Exception):
        with connect(ws_url, additional_headers={"Origin": stack}, open_timeout=10) as ws:
            ws.recv(timeout=5)
