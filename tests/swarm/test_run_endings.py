"""Every run ends with a reason (budget, wall time, space exhausted, stopped by whom, failed:
why), shown on the run page, in the API and in ``factory run --json``; a direction or a run
that would leave no point to evaluate is refused with that message."""

import json
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from swarm.models import Direction, Goal, Run
from swarm.runs import directions, orchestrator
from swarm.runs.directions import DirectionError
from tests.swarm.synthetic import drive, synthetic_evaluate, synthetic_goal

GEMM = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "tuning-cache" / "gemm-clblast-xgemm_RTX-3090.json.gz"
TINY_SPACE = {"parameters": [{"name": "BX", "values": [16, 32]}, {"name": "BY", "values": [1, 2]},
                             {"name": "TILE", "values": [1]}, {"name": "UNROLL", "values": [0]}],
              "restrictions": []}


def api_for(user) -> APIClient:
    token, _ = Token.objects.get_or_create(user=user)
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return c


def started(goal, **kw):
    kw.setdefault("seed", 3)
    kw.setdefault("batch_size", 4)
    return orchestrator.start_run(goal, **kw)


def first_generation_done(run, pending):
    for c in pending:
        orchestrator.evaluate_candidate(c.pk, evaluate=synthetic_evaluate)


@pytest.mark.django_db
def test_a_run_that_spends_its_budget_says_so():
    run, pending = started(synthetic_goal(), budget=8)
    drive(run, pending)
    run.refresh_from_db()
    assert run.state == Run.State.FINISHED and run.end_kind == "budget"
    assert run.end_reason == "budget spent: 8 of 8 evaluations"
    assert orchestrator.run_state(run)["end_reason"] == run.end_reason


@pytest.mark.django_db
def test_a_run_past_its_wall_time_says_so():
    run, pending = started(synthetic_goal(), budget=40, max_wall_s=30.0)
    first_generation_done(run, pending)
    Run.objects.filter(pk=run.pk).update(started_at=run.started_at - timedelta(seconds=45))
    assert orchestrator.advance(run.pk) == []
    run.refresh_from_db()
    assert run.state == Run.State.FINISHED and run.end_kind == "wall_time"
    assert run.end_reason.startswith("wall time spent: 45 s of 30 s")


@pytest.mark.django_db
def test_a_run_that_evaluates_every_point_ends_as_space_exhausted_and_a_rerun_is_refused(owner):
    goal = synthetic_goal(space=TINY_SPACE)
    run, pending = started(goal, budget=20)
    drive(run, pending)
    run.refresh_from_db()
    assert run.candidates.count() == 4
    assert run.state == Run.State.FINISHED and run.end_kind == "space_exhausted"
    assert "every valid point of the run's space has a candidate (4 in this run, 4 for the goal)" in run.end_reason
    # Re-running the exhausted goal is refused, not "finished" with 0 candidates.
    with pytest.raises(ValueError, match="already has a candidate"):
        started(goal, budget=20)
    assert Run.objects.filter(goal=goal).count() == 1
    response = api_for(owner).post("/api/runs/", {"goal": goal.pk, "budget": 20}, format="json")
    assert response.status_code == 400 and "nothing left to search" in response.json()["detail"]


@pytest.mark.django_db
def test_a_run_whose_generation_cannot_be_proposed_fails_with_the_reason(monkeypatch):
    run, pending = started(synthetic_goal(), budget=40)
    first_generation_done(run, pending)

    def unreadable(self):
        raise FileNotFoundError("recorded data set /data/gone.json.gz is missing")

    monkeypatch.setattr(Run, "design_space", unreadable)
    assert orchestrator.advance(run.pk) == []
    run.refresh_from_db()
    assert run.state == Run.State.FAILED and run.end_kind == "failed"
    assert run.end_reason == ("generation 2 could not be proposed: FileNotFoundError: "
                              "recorded data set /data/gone.json.gz is missing")


@pytest.mark.django_db
def test_stopping_says_who_stopped_and_how(owner, client):
    run, _ = started(synthetic_goal(), budget=40)
    response = api_for(owner).post(f"/api/runs/{run.pk}/stop/")
    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "stopped" and body["end_kind"] == "stopped"
    assert body["end_reason"] == "stopped by owner through the API in generation 1"
    assert body["progress"]["end_reason"] == body["end_reason"]

    run2, _ = started(synthetic_goal(name="page"), budget=40)
    client.force_login(owner)
    client.post(reverse("run-stop", args=[run2.pk]))
    run2.refresh_from_db()
    assert run2.end_reason == "stopped by owner through the run page in generation 1"
    # The run page shows it.
    page = client.get(reverse("run-detail", args=[run2.pk])).content.decode()
    assert 'id="run-end"' in page and "stopped by owner through the run page" in page
    # The page's script stops with fetch: the run's state comes back, the page stays.
    run3, _ = started(synthetic_goal(name="fetch"), budget=40)
    r = client.post(reverse("run-stop", args=[run3.pk]), HTTP_ACCEPT="application/json")
    assert r.status_code == 200 and r.json()["ok"] is True
    assert r.json()["run"]["state"] == "stopped" and "through the run page" in r.json()["run"]["end_reason"]


@pytest.mark.django_db
def test_a_stop_direction_names_its_author(owner):
    run, pending = started(synthetic_goal(), budget=40)
    first_generation_done(run, pending)
    d = directions.submit(run, "stop", {}, owner)
    orchestrator.advance(run.pk)
    run.refresh_from_db()
    assert run.state == Run.State.STOPPED and run.end_kind == "stopped"
    assert run.end_reason == f"stopped by owner (direction {d.pk}, applied before generation 2)"


@pytest.mark.django_db
def test_pausing_every_agent_ends_the_run_with_that_reason(owner):
    run, pending = started(synthetic_goal(), budget=40, agents=[{"name": "r", "kind": "random", "settings": {}}])
    first_generation_done(run, pending)
    directions.submit(run, "pause_agent", {"agent": "r"}, owner)
    orchestrator.advance(run.pk)
    run.refresh_from_db()
    assert run.end_kind == "stopped" and "every agent is paused" in run.end_reason


@pytest.mark.django_db
def test_factory_run_json_has_the_end_reason():
    goal = synthetic_goal(space=TINY_SPACE)
    out = StringIO()
    from unittest import mock

    with mock.patch("swarm.runs.orchestrator.evaluator_for", return_value=synthetic_evaluate):
        call_command("factory", "run", "--goal", str(goal.pk), "--budget", "3", "--seed", "1", "--json",
                     "--no-baseline", stdout=out)
    summary = json.loads(out.getvalue())
    assert summary["end_kind"] == "budget" and summary["end_reason"] == "budget spent: 3 of 3 evaluations"


# --- directions that would leave nothing to evaluate ----------------------------------------------


@pytest.fixture
def running(db, owner):
    run, pending = started(synthetic_goal(space=TINY_SPACE), budget=40, batch_size=2)
    first_generation_done(run, pending)
    return run


def test_a_restriction_that_excludes_every_point_is_refused(running, owner):
    with pytest.raises(DirectionError, match=r"leaves no point to evaluate: none of the 4 points .*BX > 10\*\*9"):
        directions.submit(running, "add_restriction", {"expression": "BX > 10**9"}, owner)
    assert not Direction.objects.exists()


def test_a_restriction_to_evaluated_points_only_is_refused(running, owner):
    taken = sorted((c.params["BX"], c.params["BY"]) for c in running.candidates.all())
    assert len(taken) == 2
    only_taken = " or ".join(f"(BX == {bx} and BY == {by})" for bx, by in taken)
    with pytest.raises(DirectionError, match="every valid point of the space it leaves already has a candidate"):
        directions.submit(running, "add_restriction", {"expression": only_taken}, owner)
    # A direction that leaves an open point is accepted.
    bx, by = next((bx, by) for bx in (16, 32) for by in (1, 2) if (bx, by) not in taken)
    directions.submit(running, "add_restriction", {"expression": f"BX == {bx} and BY == {by}"}, owner)


def test_the_api_and_the_page_refuse_it_with_the_message(running, owner, client):
    response = api_for(owner).post(f"/api/runs/{running.pk}/directions/",
                                   {"kind": "add_restriction", "payload": {"expression": "BX > 10**9"}}, format="json")
    assert response.status_code == 400 and "leaves no point to evaluate" in response.json()["detail"]
    client.force_login(owner)
    page = client.post(reverse("run-direction", args=[running.pk]), {"kind": "add_restriction", "expression": "BX > 10**9"})
    assert page.status_code == 400 and "leaves no point to evaluate" in page.content.decode()
    assert not Direction.objects.exists()


def test_two_directions_that_together_empty_the_space_the_second_is_rejected_at_the_boundary(owner, db):
    run, pending = started(synthetic_goal(), budget=40)
    first_generation_done(run, pending)
    a = directions.submit(run, "add_restriction", {"expression": "BX <= 32"}, owner)
    b = directions.submit(run, "add_restriction", {"expression": "BX >= 64"}, owner)
    new = orchestrator.advance(run.pk)
    a.refresh_from_db(), b.refresh_from_db()
    assert a.state == "applied" and b.state == "rejected" and "leaves no point to evaluate" in b.effect["rejected"]
    assert new and all(c.params["BX"] <= 32 for c in new)


@pytest.mark.skipif(not GEMM.exists(), reason="shared tuning-cache data set not present")
@pytest.mark.django_db
def test_on_a_replay_goal_mwg_beyond_any_recorded_value_is_refused(owner):
    from swarm.goals.replay import import_cache

    goal, _ = import_cache(GEMM)
    run, pending = orchestrator.start_run(goal, budget=20, seed=1, batch_size=4)
    orchestrator.evaluate_batch([c.pk for c in pending])
    response = api_for(owner).post(f"/api/runs/{run.pk}/directions/",
                                   {"kind": "add_restriction", "payload": {"expression": "MWG > 10**9"}}, format="json")
    assert response.status_code == 400, response.content
    assert "leaves no point to evaluate" in response.json()["detail"]
    assert Goal.objects.get(pk=goal.pk).runs.get().state == Run.State.RUNNING


@pytest.mark.django_db
def test_the_pages_stop_answers_json_errors_to_its_fetch(owner, outsider, client):
    run, _ = started(synthetic_goal(), budget=40)
    url, accept = reverse("run-stop", args=[run.pk]), {"HTTP_ACCEPT": "application/json"}
    r = client.post(url, **accept)
    assert r.status_code == 401 and r.json() == {"ok": False, "error": "sign in first"}
    client.force_login(outsider)
    r = client.post(url, **accept)
    assert r.status_code == 403 and "lacks the swarm.change_run permission" in r.json()["error"]
    run.refresh_from_db()
    assert run.state == Run.State.RUNNING
    client.force_login(owner)
    r = client.post(reverse("run-stop", args=[run.pk + 1000]), **accept)
    assert r.status_code == 404 and r.json()["error"] == f"no run {run.pk + 1000}"
    assert client.post(url, **accept).json()["stopped"] is True
    again = client.post(url, **accept).json()
    assert again["stopped"] is False and "had already ended (stopped)" in again["note"]
    # Page requests keep the login redirect and the 403 page.
    client.logout()
    assert client.post(url).status_code == 302
