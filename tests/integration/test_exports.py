"""Exports from the real server (uvicorn, ASGI): streamed as they are read, in both modes."""

import csv
import io
import json
import urllib.request

import pytest

from benchmarks.run_page import BENCH_SPACE, populate
from tests.integration.conftest import ARTIFACTS

pytestmark = pytest.mark.timeout(300)


def test_a_long_run_exports_through_the_asgi_server_without_being_buffered_first(stack, transactional_db, owner):
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
    log = (ARTIFACTS / "logs" / "server.log").read_text(errors="replace")
    assert "synchronous iterators" not in log  # Django's warning when it buffers a whole response
