"""The REST API: token and session auth, roles, goals, runs, steering, candidates and
evidence, exports, promotions and production kernels, and the OpenAPI schema."""

import csv
import io
import json

import pytest
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from benchmarks.run_page import BENCH_SPACE, populate
from kernels.interchange.tuning_cache import load_cache
from swarm.models import AuditEvent, Direction, Evidence, Goal, Insight, PromotionRequest, Run
from swarm.production import promotion
from tests.swarm.test_views import paired_timed, timed

GOAL = {
    "name": "rmsnorm via the API",
    "workload": "rmsnorm",
    "target": "cpu-x86_64",
    "shape_set": "test-small",
    "objectives": [{"metric": "latency_ms", "direction": "minimize"}],
    "constraints": [{"metric": "max_rel_error", "op": "<=", "value": 1e-4}],
    "space": {"parameters": [{"name": "UNROLL", "values": [1, 2, 4]}, {"name": "VEC", "values": [1, 8]}],
              "restrictions": ["UNROLL * VEC <= 16"]},
}


def api_for(user) -> APIClient:
    token, _ = Token.objects.get_or_create(user=user)
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return c


@pytest.fixture
def engineer(owner):
    return api_for(owner)


@pytest.fixture
def viewer(outsider):
    return api_for(outsider)


@pytest.fixture
def big_goal(db, owner):
    """A goal whose space holds the benchmark's synthetic runs."""
    from swarm.goals.lifecycle import default_goal

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", user=owner, name="synthetic")
    goal.space = BENCH_SPACE
    goal.save(update_fields=["space"])
    return goal


@pytest.fixture
def synthetic_run(big_goal, owner):
    return populate(big_goal, 40, seed=3, batch_size=8, state="finished", user=owner)


def test_the_api_needs_a_user(db):
    r = APIClient().get("/api/goals/")
    assert r.status_code in (401, 403)


@pytest.mark.django_db
def test_a_token_is_obtained_with_username_and_password(owner):
    r = APIClient().post(reverse("api-token"), {"username": "owner", "password": "pw-owner"}, format="json")
    assert r.status_code == 200 and Token.objects.get(user=owner).key == r.json()["token"]


@pytest.mark.django_db
def test_the_openapi_schema_and_its_docs_are_served_without_outside_assets(engineer):
    schema = engineer.get(reverse("api-schema"))
    assert schema.status_code == 200
    text = schema.content.decode()
    for path in ("/api/goals/", "/api/runs/{id}/directions/", "/api/runs/{id}/export/kernel_tuner_cache.json",
                 "/api/production/{workload}/{target}/{shape_set}/", "/api/promotions/"):
        assert path in text
    docs = engineer.get(reverse("api-docs")).content.decode()
    assert "swagger-ui" in docs and "cdn." not in docs and "unpkg" not in docs


# --- goals ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_engineer_creates_and_changes_a_goal(engineer):
    r = engineer.post("/api/goals/", GOAL, format="json")
    assert r.status_code == 201, r.json()
    body = r.json()
    assert body["space_size"] == {"cartesian": 6, "valid": 5, "exact": True}  # UNROLL=4, VEC=8 excluded
    assert "void rmsnorm(" in body["source"]
    r = engineer.patch(f"/api/goals/{body['id']}/", {"name": "renamed"}, format="json")
    assert r.status_code == 200 and r.json()["name"] == "renamed"
    assert AuditEvent.objects.filter(verb__in=["goal.create", "goal.change"]).count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("change, field, message", [
    ({"space": {"parameters": [{"name": "UNROLL", "values": [1]}], "restrictions": ["open('x')"]}}, "space", "not allowed"),
    ({"shape_set": "nope"}, "shape_set", "is not one of rmsnorm's"),
    ({"workload": "nope"}, "workload", "unknown workload"),
    ({"target": "tpu-v5"}, "target", "unknown target"),
    ({"objectives": [{"metric": "latency_ms", "direction": "down"}]}, "objectives", "minimize or maximize"),
    ({"constraints": [{"metric": "gbps", "op": ">", "value": 1}]}, "constraints", '"op": "<=" | ">="'),
])
def test_a_bad_goal_is_refused_with_a_clear_message_and_nothing_saved(engineer, change, field, message):
    r = engineer.post("/api/goals/", {**GOAL, **change}, format="json")
    assert r.status_code == 400
    assert message in str(r.json()[field])
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_a_viewer_reads_but_cannot_write(viewer, big_goal):
    assert viewer.get("/api/goals/").status_code == 200
    r = viewer.post("/api/goals/", GOAL, format="json")
    assert r.status_code == 403 and "lacks the add_goal permission" in r.json()["detail"]
    assert viewer.post("/api/runs/", {"goal": big_goal.pk, "budget": 2}, format="json").status_code == 403


# --- runs, steering, candidates ---------------------------------------------------------------------


@pytest.mark.django_db
def test_an_engineer_starts_steers_and_stops_a_run(engineer, small_goal):
    r = engineer.post("/api/runs/", {"goal": small_goal.pk, "budget": 6, "batch_size": 2, "seed": 4}, format="json")
    assert r.status_code == 201, r.json()
    run = r.json()
    assert run["state"] == "running" and run["progress"]["status_counts"] == {"queued": 2}
    url = f"/api/runs/{run['id']}/directions/"
    bad = engineer.post(url, {"kind": "narrow", "payload": {"param": "VEC", "values": [3]}}, format="json")
    assert bad.status_code == 400 and "VEC has no value(s) [3]" in bad.json()["detail"]
    good = engineer.post(url, {"kind": "pause_agent", "payload": {"agent": "gp"}}, format="json")
    assert good.status_code == 201 and good.json()["state"] == "pending"
    assert [d["kind"] for d in engineer.get(url).json()["directions"]] == ["pause_agent"]
    assert engineer.get("/api/directions/", {"run": run["id"]}).json()["count"] == 1
    stopped = engineer.post(f"/api/runs/{run['id']}/stop/")
    assert stopped.json()["state"] == "stopped"
    assert engineer.post("/api/runs/", {"goal": small_goal.pk, "budget": 0}, format="json").status_code == 400


@pytest.mark.django_db
def test_candidates_and_their_evidence(engineer, synthetic_run):
    listing = engineer.get(f"/api/runs/{synthetic_run.pk}/candidates/", {"status": "ok", "limit": 5}).json()
    assert listing["count"] == synthetic_run.candidates.filter(status="ok").count() and len(listing["results"]) == 5
    c = listing["results"][0]
    assert c["metrics"]["latency_ms"] > 0 and c["launch_plan"]["entry_point"] == "rmsnorm"
    evidence = engineer.get(f"/api/candidates/{c['id']}/evidence/").json()
    assert set(evidence["samples_ms"]) and evidence["status"] == "ok"
    summary = engineer.get(f"/api/runs/{synthetic_run.pk}/summary/").json()
    assert summary["best"]["metrics"]["latency_ms"] > 0 and summary["frontier"]


@pytest.mark.django_db
def test_insights_are_listed_per_workload(engineer, synthetic_run):
    Insight.objects.create(workload="rmsnorm", target="cpu-x86_64", kind="failure_rule", data={"rule": "VEC > 8"})
    Insight.objects.create(workload="gemm", target="cpu-x86_64", kind="failure_rule", data={"rule": "X"})
    assert engineer.get("/api/insights/", {"workload": "rmsnorm"}).json()["count"] == 1
    assert engineer.get(f"/api/runs/{synthetic_run.pk}/insights/").json()["insights"][0]["data"]["rule"] == "VEC > 8"


# --- exports ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_run_exports_as_csv_and_json(engineer, synthetic_run):
    r = engineer.get(f"/api/runs/{synthetic_run.pk}/export/candidates.csv")
    assert r["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert len(rows) == 40 and {"id", "status", "UNROLL", "latency_ms", "max_rel_error"} <= set(rows[0])
    ok = [row for row in rows if row["status"] == "ok"]
    assert ok and all(float(row["latency_ms"]) > 0 for row in ok)
    r = engineer.get(f"/api/runs/{synthetic_run.pk}/export/candidates.json")
    data = json.loads(b"".join(r.streaming_content))
    assert data["run"]["id"] == synthetic_run.pk and len(data["candidates"]) == 40


@pytest.mark.django_db
def test_exports_stay_streamed_under_asgi(engineer, synthetic_run, owner):
    """Through Django's ASGI request handling (the production server's): each export comes as an
    asynchronous iterator, not a synchronous one that Django would consume whole before the
    first byte (and warn), with the same content as under WSGI."""
    import warnings

    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    key = Token.objects.get(user=owner).key

    async def fetch(path: str) -> tuple[bool, bytes]:
        r = await AsyncClient().get(path, headers={"Authorization": f"Token {key}"})
        if not r.is_async:
            return False, b""
        return True, b"".join([chunk async for chunk in r.streaming_content])

    for name in ("candidates.csv", "candidates.json", "kernel_tuner_cache.json"):
        path = f"/api/runs/{synthetic_run.pk}/export/{name}"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            is_async, body = async_to_sync(fetch)(path)
        assert is_async, name
        assert not [w for w in caught if "iterators" in str(w.message)], [str(w.message) for w in caught]
        assert body == b"".join(engineer.get(path).streaming_content), name


@pytest.mark.django_db
def test_a_run_exports_as_a_kernel_tuner_cache_that_reads_back(engineer, synthetic_run, tmp_path):
    compiled = synthetic_run.candidates.filter(status="ok").select_related("evidence").first()
    Evidence.objects.filter(pk=compiled.evidence.pk).update(  # evidence is final: set as if evaluated so
        fingerprint={**compiled.evidence.fingerprint, "compile_s": 0.25})
    r = engineer.get(f"/api/runs/{synthetic_run.pk}/export/kernel_tuner_cache.json")
    data = json.loads(b"".join(r.streaming_content))
    assert data["tune_params_keys"] == [p["name"] for p in BENCH_SPACE["parameters"]]
    assert len(data["cache"]) == 40
    failed = [e for e in data["cache"].values() if isinstance(e["time"], str)]
    assert failed and {e["time"] for e in failed} <= {"CompilationFailedConfig", "RuntimeFailedConfig", "InvalidConfig"}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    cache = load_cache(path)  # the project's own Kernel Tuner reader
    assert cache.size == 40
    c = synthetic_run.candidates.filter(status="ok").select_related("evidence").first()
    e = cache.lookup(c.params)
    assert str(e.status) == "ok"
    entry = data["cache"][",".join(str(c.params[k]) for k in data["tune_params_keys"])]
    assert entry["time"] == pytest.approx(c.evidence.metrics["latency_ms"]) and len(entry["times"]) == 10
    assert entry["compile_time"] == 250.0  # Kernel Tuner's field, in ms, from the evaluation's compile time
    assert data["device_name"] == synthetic_run.goal.target and data["problem_size"]


# --- promotions and production ---------------------------------------------------------------------


@pytest.mark.django_db
def test_promotion_through_the_api_and_the_production_kernel_by_key(engineer, viewer, owner, synthetic_run):
    a, b = synthetic_run.candidates.filter(status="ok", evidence__metrics__max_rel_error__lte=1e-4).order_by("id")[:2]
    assert viewer.post("/api/promotions/", {"candidate": a.pk}, format="json").status_code == 403
    r = engineer.post("/api/promotions/", {"candidate": a.pk, "note": "via API"}, format="json")
    assert r.status_code == 202 and r.json()["state"] == "validating"
    req = promotion.validate_request(r.json()["id"], evaluate=timed({a.pk: 1.0}))
    assert req.state == "promoted"
    assert engineer.get(f"/api/promotion-requests/{req.pk}/").json()["state"] == "promoted"
    kernel = viewer.get("/api/production/rmsnorm/cpu-x86_64/test-small/").json()
    assert kernel["candidate"] == a.pk and kernel["source"] and kernel["launch_plan"]["defines"].startswith("#define")
    assert kernel["evidence"]["status"] == "ok" and kernel["validation"]["candidate"]
    again = engineer.post("/api/promotions/", {"candidate": a.pk}, format="json")
    assert again.status_code == 400 and "already the production kernel" in again.json()["detail"]
    promotion.promote(b, owner, evaluate=timed({a.pk: 2.0, b.pk: 1.0}), compare=paired_timed({a.pk: 2.0, b.pk: 1.0}))
    assert engineer.get("/api/promotions/").json()["count"] == 2
    assert viewer.post("/api/production/rmsnorm/cpu-x86_64/test-small/rollback/").status_code == 403
    rolled = engineer.post("/api/production/rmsnorm/cpu-x86_64/test-small/rollback/", {"note": "regression"}, format="json")
    assert rolled.status_code == 200 and rolled.json()["candidate"] == a.pk and rolled.json()["kind"] == "rollback"
    assert PromotionRequest.objects.count() == 2


@pytest.mark.django_db
def test_the_production_kernel_is_served_with_session_auth_too(client, owner, synthetic_run):
    a = synthetic_run.candidates.filter(status="ok", evidence__metrics__max_rel_error__lte=1e-4).first()
    promotion.promote(a, owner, evaluate=timed({a.pk: 1.0}))
    client.force_login(owner)
    assert client.get("/api/production/rmsnorm/cpu-x86_64/test-small/").json()["candidate"] == a.pk
    assert client.get("/api/production/").json()["kernels"][0]["candidate"] == a.pk


@pytest.mark.django_db
def test_runs_are_listed_per_goal(engineer, synthetic_run, big_goal):
    assert engineer.get("/api/runs/", {"goal": big_goal.pk}).json()["count"] == 1
    assert Run.objects.count() == 1 and not Direction.objects.exists()


@pytest.mark.django_db
def test_a_goal_is_archived_through_the_api_and_then_starts_no_runs(client, owner):
    from swarm.goals.lifecycle import default_goal
    from swarm.models import AuditEvent

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", name="archive via api")
    client.force_login(owner)
    r = client.post(f"/api/goals/{goal.pk}/archive/", {}, content_type="application/json")
    assert r.status_code == 200 and r.json()["archived"] is True and r.json()["archived_at"]
    assert [g["id"] for g in client.get("/api/goals/?archived=true").json()["results"]] == [goal.pk]
    assert goal.pk not in [g["id"] for g in client.get("/api/goals/?archived=false").json()["results"]]
    run = client.post("/api/runs/", {"goal": goal.pk, "budget": 2}, content_type="application/json")
    assert run.status_code == 400 and "archived" in str(run.json()["detail"])
    assert AuditEvent.objects.filter(verb="goal.archive", subject=f"goal {goal.pk}").count() == 1
    back = client.post(f"/api/goals/{goal.pk}/archive/", {"archived": False}, content_type="application/json")
    assert back.json()["archived"] is False
    copy = client.post(f"/api/goals/{goal.pk}/duplicate/")
    assert copy.status_code == 201 and copy.json()["name"] == "archive via api (copy)"
