"""Every write endpoint of the API on a replay goal (made by ``factory import-cache``): a clear
4xx or success, never a 500."""

from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from kernels.backends import replay
from swarm.models import Goal, Run
from swarm.runs import orchestrator

GEMM = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "tuning-cache" / "gemm-clblast-xgemm_RTX-3090.json.gz"

pytestmark = pytest.mark.skipif(not GEMM.exists(), reason="shared tuning-cache data set not present")


@pytest.fixture
def api(owner) -> APIClient:
    token, _ = Token.objects.get_or_create(user=owner)
    c = APIClient(raise_request_exception=False)
    c.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return c


@pytest.fixture
def goal(db, owner) -> Goal:
    from swarm.goals.replay import import_cache

    return import_cache(GEMM, user=owner)[0]


@pytest.fixture
def fresh_process(monkeypatch):
    """No data set registered in this process, as in a web process that did not import the file."""
    monkeypatch.setattr(replay, "_registered", {})


def narrowed(goal: Goal, keep: int = 2) -> dict:
    space = dict(goal.space)
    space["parameters"] = [dict(p, values=p["values"][:keep]) if p["name"] == "MWG" else p for p in space["parameters"]]
    return space


def test_patching_the_name_objectives_and_constraints_of_a_replay_goal_succeeds(api, goal, fresh_process):
    r = api.patch(f"/api/goals/{goal.pk}/", {"name": "gemm on the 3090"}, format="json")
    assert r.status_code == 200, r.content
    assert r.json()["name"] == "gemm on the 3090" and r.json()["space_size"]["valid"] == 17956
    r = api.patch(f"/api/goals/{goal.pk}/", {"constraints": [{"metric": "latency_ms", "op": "<=", "value": 50}]},
                  format="json")
    assert r.status_code == 200, r.content
    goal.refresh_from_db()
    assert goal.name == "gemm on the 3090" and goal.source == "" and goal.constraints[0]["value"] == 50.0


def test_narrowing_a_replay_goals_space_keeps_its_domain(api, goal, fresh_process):
    space = narrowed(goal)
    r = api.patch(f"/api/goals/{goal.pk}/", {"space": space}, format="json")
    assert r.status_code == 200, r.content
    goal.refresh_from_db()
    assert goal.space["domain"] == space["domain"] and 0 < r.json()["space_size"]["valid"] < 17956
    # Dropping the domain would admit unrecorded configurations: refused, with the reason.
    r = api.patch(f"/api/goals/{goal.pk}/", {"space": {k: v for k, v in space.items() if k != "domain"}}, format="json")
    assert r.status_code == 400 and "keeps its domain" in r.json()["space"][0]


@pytest.mark.parametrize("field, value", [("workload", "rmsnorm"), ("target", "cpu-x86_64"),
                                          ("target", "replay:other"), ("shape_set", "test-small")])
def test_changing_what_names_the_recorded_data_set_is_refused(api, goal, field, value):
    r = api.patch(f"/api/goals/{goal.pk}/", {field: value}, format="json")
    assert r.status_code == 400, r.content
    message = " ".join(r.json()[field])
    assert "replay goal" in message or "unknown workload" in message or "import-cache" in message


def test_put_with_the_goals_own_fields_succeeds(api, goal, fresh_process):
    body = {f: getattr(goal, f) for f in ("name", "workload", "target", "shape_set", "objectives", "constraints", "space")}
    r = api.put(f"/api/goals/{goal.pk}/", {**body, "name": "renamed by PUT"}, format="json")
    assert r.status_code == 200, r.content
    assert Goal.objects.get(pk=goal.pk).name == "renamed by PUT"


def test_creating_a_goal_on_a_replay_target_or_with_a_domain_is_refused(api, goal):
    body = {"name": "x", "workload": "rmsnorm", "target": goal.target, "shape_set": "test-small",
            "objectives": [{"metric": "latency_ms", "direction": "minimize"}], "constraints": [], "source": "int x;",
            "space": {"parameters": [{"name": "UNROLL", "values": [1, 2]}], "restrictions": []}}
    r = api.post("/api/goals/", body, format="json")
    assert r.status_code == 400 and "import-cache" in r.json()["target"][0]
    r = api.post("/api/goals/", {**body, "target": "cpu-x86_64", "space": goal.space}, format="json")
    assert r.status_code == 400 and "'domain' belongs to replay goals" in r.json()["space"][0]


def test_run_endpoints_on_a_replay_goal(api, goal, fresh_process):
    r = api.post("/api/runs/", {"goal": goal.pk, "budget": 12, "batch_size": 4, "seed": 2}, format="json")
    assert r.status_code == 201, r.content
    run = Run.objects.get(pk=r.json()["id"])
    orchestrator.evaluate_batch(list(run.candidates.values_list("pk", flat=True)))
    directions = f"/api/runs/{run.pk}/directions/"
    r = api.post(directions, {"kind": "narrow", "payload": {"param": "MWG", "values": [64, 128]}}, format="json")
    assert r.status_code == 201, r.content
    r = api.post(directions, {"kind": "add_restriction", "payload": {"expression": "MWG > 10**9"}}, format="json")
    assert r.status_code == 400 and "leaves no point to evaluate" in r.json()["detail"]
    r = api.post(directions, {"kind": "set_constraint", "payload": {"metric": "latency_ms", "op": "<=", "value": 40}},
                 format="json")
    assert r.status_code == 201, r.content
    ok = run.candidates.filter(status="ok").first()
    r = api.post("/api/promotions/", {"candidate": ok.pk}, format="json")
    assert r.status_code == 400 and r.json()["detail"]
    r = api.post(f"/api/production/{goal.workload}/{goal.target}/{goal.shape_set}/rollback/", {}, format="json")
    assert r.status_code == 400 and "nothing is in production" in r.json()["detail"]
    r = api.post(f"/api/runs/{run.pk}/stop/")
    assert r.status_code == 200 and r.json()["end_reason"].startswith("stopped by owner through the API")


def test_no_write_method_on_any_replay_object_answers_500(api, goal, fresh_process):
    run, pending = orchestrator.start_run(goal, budget=4, seed=1, batch_size=4)
    orchestrator.evaluate_batch([c.pk for c in pending])
    candidate = run.candidates.first()
    urls = ["/api/goals/", f"/api/goals/{goal.pk}/", "/api/runs/", f"/api/runs/{run.pk}/", f"/api/runs/{run.pk}/stop/",
            f"/api/runs/{run.pk}/directions/", f"/api/candidates/{candidate.pk}/", "/api/promotions/",
            "/api/directions/", "/api/promotion-requests/", "/api/insights/",
            f"/api/production/{goal.workload}/{goal.target}/{goal.shape_set}/",
            f"/api/production/{goal.workload}/{goal.target}/{goal.shape_set}/rollback/"]
    bodies = [{}, {"name": "n", "goal": goal.pk, "kind": "stop", "candidate": candidate.pk, "space": goal.space,
                   "workload": goal.workload, "target": goal.target, "budget": 2}]
    for url in urls:
        for method in ("post", "put", "patch", "delete"):
            for body in bodies:
                r = getattr(api, method)(url, body, format="json")
                assert r.status_code < 500, (method, url, body, r.status_code, r.content[:300])
