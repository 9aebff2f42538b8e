"""A run's results from stored columns: the frontier and best match the in-memory definition,
no candidate meeting the constraints is said and ranked by total violation, and the summary
builds objects only for the candidates it returns."""

import math

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from benchmarks.run_page import BENCH_SPACE, populate
from swarm.models import Candidate, CandidateStatus, Evidence
from swarm.runs import results, summaries


@pytest.fixture
def big_goal(db, owner):
    from swarm.goals.lifecycle import default_goal

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", user=owner, name="synthetic")
    goal.space = BENCH_SPACE
    goal.save(update_fields=["space"])
    return goal


def _api(user) -> APIClient:
    token, _ = Token.objects.get_or_create(user=user)
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return c


def _in_memory(run):
    cands = list(run.candidates.select_related("evidence").exclude(status__in=("queued", "running")))
    return [c.pk for c in summaries.frontier(run, cands)], summaries.best(run, cands)


@pytest.mark.django_db
@pytest.mark.parametrize("objectives", [
    [{"metric": "latency_ms", "direction": "minimize"}],
    [{"metric": "latency_ms", "direction": "minimize"}, {"metric": "max_rel_error", "direction": "minimize"}],
    [{"metric": "gbps", "direction": "maximize"}, {"metric": "max_abs_error", "direction": "minimize"}],
    [{"metric": "latency_ms", "direction": "minimize"}, {"metric": "max_rel_error", "direction": "minimize"},
     {"metric": "max_abs_error", "direction": "maximize"}],
])
def test_the_stored_column_frontier_is_the_in_memory_one(big_goal, owner, objectives):
    big_goal.objectives = objectives
    big_goal.save(update_fields=["objectives"])
    run = populate(big_goal, 300, seed=5, state="finished", user=owner)
    # exact duplicates of a frontier point are all kept
    first = run.candidates.filter(status="ok").select_related("evidence").first()
    twin = Candidate.objects.create(goal=big_goal, run=run, generation=1, agent="random", content_hash="twin",
                                    params=first.params, source="", status="ok")
    Evidence.objects.create(candidate=twin, status="ok", metrics=first.evidence.metrics)
    ids, best = _in_memory(run)
    assert ids and results.frontier_ids(run)[0] == ids
    # the best is the frontier's first, also when a later twin ties with it
    top = Candidate.objects.select_related("evidence").get(pk=ids[0])
    late = Candidate.objects.create(goal=big_goal, run=run, generation=1, agent="random", content_hash="late twin",
                                    params=top.params, source="", status="ok")
    Evidence.objects.create(candidate=late, status="ok", metrics=top.evidence.metrics)
    ids, best = _in_memory(run)
    assert results.best(run).pk == ids[0] == top.pk and late.pk in ids
    summary = summaries.run_summary(run)
    assert summary["best"]["id"] == best.pk and [c["id"] for c in summary["frontier"]] == ids
    assert summary["note"] == "" and summary["closest"] == []
    assert summary["feasible"] == sum(1 for c in run.candidates.select_related("evidence")
                                      if c.status == "ok" and run.is_feasible(c.evidence.metrics))


@pytest.mark.django_db
def test_the_summary_builds_objects_only_for_what_it_returns(big_goal, owner, monkeypatch,
                                                             django_assert_max_num_queries):
    big_goal.objectives = [{"metric": "latency_ms", "direction": "minimize"},
                           {"metric": "max_rel_error", "direction": "minimize"}]
    big_goal.save(update_fields=["objectives"])
    run = populate(big_goal, 400, seed=2, state="finished", user=owner)
    built = []
    from_db = Candidate.from_db.__func__
    monkeypatch.setattr(Candidate, "from_db", classmethod(lambda cls, *a: built.append(1) or from_db(cls, *a)))
    with django_assert_max_num_queries(16):  # auth, permissions, run, counts, frontier, agents
        summary = _api(owner).get(f"/api/runs/{run.pk}/summary/").json()
    assert 0 < len(summary["frontier"]) < 40
    assert len(built) <= len(summary["frontier"]) + 1  # the run itself is no Candidate


@pytest.mark.django_db
def test_no_feasible_candidate_is_said_and_the_closest_are_ranked_by_total_violation(big_goal, owner):
    big_goal.constraints = [{"metric": "max_rel_error", "op": "<=", "value": 1e-12},
                            {"metric": "gbps", "op": ">=", "value": 1e6}]
    big_goal.save(update_fields=["constraints"])
    run = populate(big_goal, 40, seed=4, state="finished", user=owner)
    ok = run.candidates.filter(status=CandidateStatus.OK).count()
    summary = _api(owner).get(f"/api/runs/{run.pk}/summary/").json()
    assert summary["frontier"] == [] and summary["best"] is None and summary["feasible"] == 0
    assert summary["ok"] == ok > 0
    assert summary["note"].startswith(f"no feasible candidate: none of the {ok} ok candidates meets")
    assert "max_rel_error <= 1e-12" in summary["note"] and "gbps >= 1e+06" in summary["note"]
    closest = summary["closest"]
    assert len(closest) == min(ok, results.CLOSEST_SHOWN)
    everyone = sorted(
        (results.total_violation(run.constraints, c.evidence.metrics), c.evidence.metrics["latency_ms"], c.pk)
        for c in run.candidates.filter(status="ok").select_related("evidence"))
    assert [c["id"] for c in closest] == [pk for _, _, pk in everyone[:len(closest)]]
    for c in closest:
        assert math.isclose(c["violation"], sum(v["excess"] for v in c["violations"]), rel_tol=1e-12)
        assert [v["constraint"] for v in c["violations"]] == ["max_rel_error <= 1e-12", "gbps >= 1e+06"]


def test_total_violation_is_relative_to_each_bound():
    cons = [{"metric": "err", "op": "<=", "value": 1e-4}, {"metric": "gbps", "op": ">=", "value": 100.0},
            {"metric": "skew", "op": "<=", "value": 0.0}]
    assert results.total_violation(cons, {"err": 1e-5, "gbps": 200.0, "skew": -1.0}) == 0.0
    assert math.isclose(results.total_violation(cons, {"err": 3e-4, "gbps": 50.0, "skew": 0.5}), 2.0 + 0.5 + 0.5)
    assert results.total_violation(cons, {"err": 1e-5, "gbps": 200.0}) == math.inf


@pytest.mark.django_db
def test_evidence_rows_carry_their_stored_metrics_however_created(big_goal, owner):
    run = populate(big_goal, 30, seed=1, state="finished", user=owner)  # bulk_create
    for e in Evidence.objects.filter(candidate__run=run):
        assert (e.latency_ms, e.max_rel_error, e.gbps) == tuple(e.metrics.get(m) for m in ("latency_ms", "max_rel_error", "gbps"))
    c = Candidate.objects.create(goal=big_goal, run=run, generation=1, agent="random", content_hash="one",
                                 params={}, source="", status="ok")
    e = Evidence.objects.create(candidate=c, status="ok", metrics={"latency_ms": 2, "gbps": "n/a"})
    e.refresh_from_db()
    assert (e.latency_ms, e.max_rel_error, e.gbps) == (2.0, None, None)


def test_the_run_page_ranks_by_the_same_total_violation():
    import json
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    cons = [{"metric": "max_rel_error", "op": "<=", "value": 1e-4}, {"metric": "gbps", "op": ">=", "value": 40.0},
            {"metric": "skew", "op": "<=", "value": 0.0}]
    cases = [{"max_rel_error": 3e-4, "gbps": 10.0, "skew": 0.25}, {"max_rel_error": 1e-6, "gbps": 50.0, "skew": -1.0},
             {"max_rel_error": 1e-6, "gbps": 50.0}]
    script = Path(__file__).resolve().parents[2] / "static" / "js" / "violation.js"
    code = (f"const {{totalViolation}} = require({json.dumps(str(script))});"
            f"const cons = {json.dumps(cons)}, cases = {json.dumps(cases)};"
            "console.log(JSON.stringify(cases.map((m) => { const v = totalViolation(cons, (k) => m[k] ?? null);"
            " return isFinite(v) ? v : 'inf'; })));")
    out = json.loads(subprocess.run([node, "-e", code], capture_output=True, text=True, check=True).stdout)
    expected = [results.total_violation(cons, m) for m in cases]
    assert out[:2] == pytest.approx(expected[:2]) and out[2] == "inf" == ("inf" if math.isinf(expected[2]) else None)


@pytest.mark.django_db
def test_the_run_page_has_the_no_feasible_notice_and_its_script(big_goal, owner):
    from django.test import Client

    run = populate(big_goal, 5, seed=1, state="finished", user=owner)
    c = Client()
    c.force_login(owner)
    page = c.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="no-feasible"' in page and "js/violation.js" in page and "js/run/main.js" in page
    script = c.get("/static/js/run/best.js")
    text = b"".join(script).decode()  # the file's content, served as an asynchronous iterator
    assert "No feasible candidate: none of the" in text and "totalViolation(meta.constraints" in text
