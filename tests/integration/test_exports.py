"""Exports from the real server (uvicorn, ASGI), in both modes: whole, in order, chunked.

That they reach the server as asynchronous iterators (not consumed whole first) is asserted
where Django's warning can be told apart: tests/swarm/test_api.py (and of static files in
tests/swarm/test_static_files.py)."""

import csv
import io
import json
import urllib.request

import pytest

from benchmarks.run_page import BENCH_SPACE, populate

pytestmark = pytest.mark.timeout(300)


def test_a_long_run_exports_whole_through_the_asgi_server(stack, transactional_db, owner):
    from rest_framework.authtoken.models import Token

    from swarm.goals.lifecycle import default_goal

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", user=owner, name="exported")
    goal.space = BENCH_SPACE
    goal.save(update_fields=["space"])
    run = populate(goal, 3000, seed=11, batch_size=100, state="finished", user=owner)
    token = Token.objects.get_or_create(user=owner)[0].key

    def get(name: str) -> bytes:
        req = urllib.request.Request(f"{stack}/api/runs/{run.pk}/export/{name}", headers={"Authorization": f"Token {token}"})
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.headers.get("Transfer-Encoding") == "chunked"  # streamed: no length known up front
            return r.read()

    rows = list(csv.DictReader(io.StringIO(get("candidates.csv").decode())))
    assert len(rows) == 3000 and [int(r["id"]) for r in rows] == sorted(int(r["id"]) for r in rows)
    data = json.loads(get("candidates.json"))
    assert len(data["candidates"]) == 3000 and data["run"]["id"] == run.pk
    assert len(json.loads(get("kernel_tuner_cache.json"))["cache"]) == 3000
