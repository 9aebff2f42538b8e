"""The run page's live feed: the compact columnar snapshot (built by the database, cached for
finished candidates) and the websocket that sends it, authenticated and origin-checked."""

import asyncio
import json
from datetime import timedelta

import pytest
from asgiref.testing import ApplicationCommunicator
from django.utils import timezone

from benchmarks.run_page import BENCH_SPACE, populate
from swarm.models import Candidate, CandidateStatus
from swarm.web import snapshot


@pytest.fixture
def synthetic_run(db, owner):
    from swarm.goals.lifecycle import default_goal

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", user=owner, name="synthetic")
    goal.space = BENCH_SPACE
    goal.save(update_fields=["space"])
    snapshot._cache.clear()
    return populate(goal, 60, seed=2, batch_size=8, user=owner)


def columns(run) -> dict:
    return json.loads(snapshot.columnar_snapshot_json(run))["columns"]


def python_columns(run) -> dict:
    params = [p["name"] for p in run.space["parameters"]]
    return json.loads(snapshot._columns_python(run, params, snapshot.metric_names(run)))


def same(a: dict, b: dict) -> None:
    """The database's columns equal the row-by-row ones (numbers to six significant digits)."""
    assert a["n"] == b["n"] and a["id"] == b["id"] and a["gen"] == b["gen"]
    assert [a["agents"][i] for i in a["agent"]] == [b["agents"][i] for i in b["agent"]]
    assert [a["statuses"][i] for i in a["status"]] == [b["statuses"][i] for i in b["status"]]
    assert a["params"] == b["params"]
    for name, col in b["metrics"].items():
        for x, y in zip(a["metrics"][name], col):
            assert (x is None and y is None) or x == pytest.approx(y, rel=1e-5)
    for x, y in zip(a["t"], b["t"]):
        assert (x is None and y is None) or x == pytest.approx(y, abs=0.11)  # 0.1 s resolution


def test_the_snapshot_is_columnar_and_matches_the_rows(synthetic_run):
    data = json.loads(snapshot.columnar_snapshot_json(synthetic_run))
    cols = data["columns"]
    assert cols["n"] == 60 and len(cols["id"]) == 60
    assert set(cols["params"]) == {p["name"] for p in BENCH_SPACE["parameters"]}
    assert {"latency_ms", "max_rel_error", "gbps"} <= set(cols["metrics"])
    assert data["meta"]["run"]["evaluated"] == 60 and data["meta"]["agents"]
    same(cols, python_columns(synthetic_run))
    ok = cols["statuses"].index("ok")
    failed = [i for i, s in enumerate(cols["status"]) if s != ok]
    assert failed and all(cols["metrics"]["latency_ms"][i] is None for i in failed)


def test_finished_candidates_are_cached_and_new_ones_still_appear(synthetic_run, monkeypatch):
    monkeypatch.setattr(snapshot, "CACHE_MIN_ROWS", 10)
    first = columns(synthetic_run)
    assert len(snapshot._cache._entries) == 1
    # a new queued candidate (pending: never cached) and a change of its status
    c = Candidate.objects.create(goal=synthetic_run.goal, run=synthetic_run, generation=99, agent="random",
                                 content_hash="f" * 64, params={"UNROLL": 2}, source="x")
    second = columns(synthetic_run)
    assert second["n"] == first["n"] + 1 and second["id"][-1] == c.pk
    assert second["statuses"][second["status"][-1]] == "queued"
    Candidate.objects.filter(pk=c.pk).update(status=CandidateStatus.COMPILE_ERROR, evaluated_at=timezone.now())
    third = columns(synthetic_run)
    assert third["statuses"][third["status"][-1]] == "compile_error"
    same(third, python_columns(synthetic_run))


def test_recent_candidates_are_not_cached(synthetic_run, monkeypatch):
    monkeypatch.setattr(snapshot, "CACHE_MIN_ROWS", 10)
    synthetic_run.candidates.update(created_at=timezone.now() - timedelta(seconds=5))
    columns(synthetic_run)
    assert not snapshot._cache._entries


# --- the websocket -------------------------------------------------------------------------------------


@pytest.fixture
def memory_layer(settings):
    """The consumer's logic without Redis: channels_redis pools are bound to one event loop,
    and each test here runs its own."""
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


async def _first_message(path: str, *, cookie: str | None, origin: str = "http://127.0.0.1:8000"):
    """Connect like a browser (channels' own communicator needs daphne); return
    ``(accepted, close code, first text message)``."""
    from int21_site.asgi import application

    route, _, query = path.partition("?")
    headers = [(b"origin", origin.encode()), (b"host", b"127.0.0.1:8000")]
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    comm = ApplicationCommunicator(application, {"type": "websocket", "path": route, "query_string": query.encode(),
                                                 "headers": headers, "subprotocols": []})
    await comm.send_input({"type": "websocket.connect"})
    first = await comm.receive_output(timeout=10)
    if first["type"] == "websocket.close":
        await comm.wait(timeout=5)
        return False, first.get("code"), None
    message = await comm.receive_output(timeout=10)
    await comm.send_input({"type": "websocket.disconnect", "code": 1000})
    await comm.wait(timeout=5)
    return True, None, message.get("text")


@pytest.mark.django_db(transaction=True)
def test_the_websocket_sends_the_columnar_snapshot_to_a_signed_in_user(synthetic_run, client, owner, memory_layer):
    client.force_login(owner)
    cookie = client.cookies["sessionid"].value
    connected, _, message = asyncio.run(_first_message(f"/ws/runs/{synthetic_run.pk}/?columns=1", cookie=cookie))
    assert connected
    msg = json.loads(message)
    assert msg["event"] == "snapshot" and msg["data"]["columns"]["n"] == 60
    connected, _, message = asyncio.run(_first_message(f"/ws/runs/{synthetic_run.pk}/", cookie=cookie))
    assert len(json.loads(message)["data"]["candidates"]) == 60  # the plain form for other clients


@pytest.mark.django_db(transaction=True)
def test_the_websocket_refuses_anonymous_users_and_foreign_origins(synthetic_run, client, owner, memory_layer):
    connected, code, _ = asyncio.run(_first_message(f"/ws/runs/{synthetic_run.pk}/?columns=1", cookie=None))
    assert not connected and code == 4401
    client.force_login(owner)
    cookie = client.cookies["sessionid"].value
    connected, _, _ = asyncio.run(_first_message(f"/ws/runs/{synthetic_run.pk}/", cookie=cookie, origin="https://evil.example"))
    assert not connected
