"""Pages through Django's test client: goals, runs and steering, candidates, compare,
production with promotion, roll-back and the audit log."""

import re
from dataclasses import dataclass, field

import numpy as np
import pytest
from django.urls import reverse

from kernels.comparison.paired import PairedComparison
from kernels.comparison.verdict import judge_rounds
from swarm.models import AuditEvent, Baseline, Candidate, Direction, Goal, Insight, Promotion, PromotionRequest, Run
from swarm.production import promotion
from swarm.runs import baselines, orchestrator, summaries

GOAL_POST = {
    "name": "rmsnorm test",
    "workload": "rmsnorm",
    "target": "cpu-x86_64",
    "shape_set": "test-small",
    "objective": "latency_ms",
    "objective_direction": "minimize",
    "second_objective": "max_rel_error",
    "second_direction": "minimize",
    "max_rel_error": "1e-4",
    "parameters": "ROWS_PER_CHUNK: 1, 4\nUNROLL: 1, 4\nVEC: 1, 8\nACC_DOUBLE: 0, 1",
    "restrictions": "UNROLL * VEC <= 16",
}


def test_pages_need_sign_in(client):
    response = client.get(reverse("goal-list"))
    assert response.status_code == 302 and "/login/" in response["Location"]


# --- goals ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_engineer_creates_a_goal(client, owner):
    client.force_login(owner)
    response = client.post(reverse("goal-create"), GOAL_POST)
    goal = Goal.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("goal-detail", args=[goal.pk])
    assert goal.space["restrictions"] == ["UNROLL * VEC <= 16"]
    assert goal.space_size() == 16
    assert goal.constraints == [{"metric": "max_rel_error", "op": "<=", "value": 1e-4}]
    assert "void rmsnorm(" in goal.source
    assert AuditEvent.objects.filter(verb="goal.create", subject=f"goal {goal.pk}").exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "restriction, message",
    [("__import__('os').system('true')", "not allowed"), ("UNROL > 2", "UNROL"), ("UNROLL >", "restriction"),
     ("UNROLL > 100", "exclude every one")],
)
def test_a_bad_restriction_is_shown_in_place_and_nothing_is_saved(client, owner, restriction, message):
    client.force_login(owner)
    response = client.post(reverse("goal-create"), {**GOAL_POST, "restrictions": restriction})
    assert response.status_code == 200
    assert message in response.context["form"].errors["restrictions"][0]
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_a_malformed_parameter_line_is_rejected(client, owner):
    client.force_login(owner)
    response = client.post(reverse("goal-create"), {**GOAL_POST, "parameters": "UNROLL: 1, two"})
    assert "'two'" in response.context["form"].errors["parameters"][0]
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_extra_constraints_and_a_single_objective_are_saved(client, owner):
    client.force_login(owner)
    client.post(reverse("goal-create"), {**GOAL_POST, "second_objective": "", "constraints": "gbps >= 2.5\n"})
    goal = Goal.objects.get()
    assert goal.objectives == [{"metric": "latency_ms", "direction": "minimize"}]
    assert {"metric": "gbps", "op": ">=", "value": 2.5} in goal.constraints


@pytest.mark.django_db
def test_a_malformed_constraint_is_shown_in_place(client, owner):
    client.force_login(owner)
    response = client.post(reverse("goal-create"), {**GOAL_POST, "constraints": "gbps > 3"})
    assert "expected 'METRIC <= VALUE'" in response.context["form"].errors["constraints"][0]
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_a_viewer_cannot_create_goals(client, outsider):
    client.force_login(outsider)
    assert client.post(reverse("goal-create"), GOAL_POST).status_code == 403
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_the_space_check_answers_in_place_with_size_and_preview(client, owner):
    client.force_login(owner)
    url = reverse("api-goal-check-space")
    ok = client.post(url, {**GOAL_POST}).json()
    assert ok["ok"] and ok["size"] == {"cartesian": 16, "valid": 12, "exact": True}  # UNROLL=4, VEC=8 excluded
    assert "#define" in ok["preview"] and "rmsnorm" in ok["preview"]
    bad = client.post(url, {**GOAL_POST, "restrictions": "open('/etc/passwd')"}).json()
    assert not bad["ok"] and "not allowed" in bad["errors"]["restrictions"]
    typo = client.post(url, {**GOAL_POST, "parameters": "UNROLL 1, 2"}).json()
    assert "expected 'NAME: v1, v2, ...'" in typo["errors"]["parameters"]


@pytest.mark.django_db
def test_the_form_offers_each_workloads_default_space(client, owner):
    client.force_login(owner)
    d = client.get(reverse("api-goal-defaults"), {"workload": "rmsnorm", "target": "cpu-x86_64"}).json()
    assert "ROWS_PER_CHUNK" in d["parameters"] and "void rmsnorm(" in d["source"]
    assert d["shape_set"] == "llama3-8b" and d["name"] == "rmsnorm / cpu-x86_64 / llama3-8b: minimise latency"
    g = client.get(reverse("api-goal-defaults"), {"workload": "gemm", "target": "cpu-x86_64", "shape_set": "test-small"}).json()
    assert g["name"] == "gemm / cpu-x86_64 / test-small: minimise latency" and "void gemm(" in g["source"]
    assert client.get(reverse("api-goal-defaults"), {"workload": "gemm", "target": "cpu-x86_64",
                                                 "shape_set": "nope"}).status_code == 400
    assert client.get(reverse("api-goal-defaults"), {"workload": "nope", "target": "cpu-x86_64"}).status_code == 400


@pytest.mark.django_db
def test_an_engineer_edits_a_goal_but_not_the_workload_of_a_goal_with_runs(client, owner, small_goal):
    client.force_login(owner)
    page = client.get(reverse("goal-edit", args=[small_goal.pk]))
    assert page.status_code == 200 and "ROWS_PER_CHUNK" in page.content.decode()
    form = dict(page.context["form"].initial)
    form.update(name="renamed", restrictions="UNROLL * VEC <= 16", second_objective="max_rel_error")
    form = {k: v for k, v in form.items() if v is not None}
    response = client.post(reverse("goal-edit", args=[small_goal.pk]), form)
    assert response.status_code == 302
    small_goal.refresh_from_db()
    assert small_goal.name == "renamed" and small_goal.space["restrictions"] == ["UNROLL * VEC <= 16"]
    orchestrator.start_run(small_goal, budget=1, seed=1)
    refused = client.post(reverse("goal-edit", args=[small_goal.pk]), {**form, "shape_set": "llama3-8b"})
    assert "create a new goal" in refused.context["form"].errors["shape_set"][0]
    small_goal.refresh_from_db()
    assert small_goal.shape_set == "test-small"
    assert AuditEvent.objects.filter(verb="goal.change").count() == 1


@pytest.mark.django_db
def test_the_goal_list_shows_state_best_and_speedup_over_the_stored_baseline(client, owner, evaluated_run):
    goal = evaluated_run.goal
    best = summaries.best(evaluated_run, list(evaluated_run.candidates.select_related("evidence")))
    # starting the run asked for the key's baseline; a worker stores it
    Baseline.objects.filter(workload=goal.workload, target=goal.target, shape_set=goal.shape_set).update(
        state=Baseline.State.OK, latency_ms=best.evidence.metrics["latency_ms"] * 3)
    client.force_login(owner)
    page = client.get(reverse("goal-list")).content.decode()
    assert f"#{best.pk}" in page and "3.00×" in page and "finished" in page


@pytest.mark.django_db
def test_the_baseline_is_asked_for_once_and_measured_by_the_worker(client, owner, small_goal, django_capture_on_commit_callbacks):
    client.force_login(owner)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        client.get(reverse("goal-list"))
        client.get(reverse("goal-list"))
    b = Baseline.objects.get()
    assert b.state == Baseline.State.MEASURING and len(callbacks) == 1
    assert "measuring" in client.get(reverse("goal-list")).content.decode()
    baselines.measure(b.pk, timer=lambda workload, shape_set: 0.25)
    b.refresh_from_db()
    assert b.state == Baseline.State.OK and b.latency_ms == 0.25
    cuda = Goal.objects.create(name="cuda", workload="rmsnorm", target="cuda-sm90", shape_set="test-small",
                               objectives=small_goal.objectives, space=small_goal.space, source="x")
    rows = baselines.lookup([cuda])
    assert rows[("rmsnorm", "cuda-sm90", "test-small")].state == Baseline.State.UNAVAILABLE


# --- runs: live page, steering ---------------------------------------------------------------------


@pytest.fixture
def evaluated_run(small_goal):
    run, pending = orchestrator.start_run(small_goal, budget=2, seed=5, batch_size=2)
    for c in pending:
        orchestrator.evaluate_candidate(c.pk)
    orchestrator.advance(run.pk)
    return run


@pytest.fixture
def running_run(small_goal):
    run, _ = orchestrator.start_run(small_goal, budget=20, seed=3, batch_size=2)
    return run


@pytest.mark.django_db
def test_the_run_page_carries_its_config_and_the_steering_form(client, owner, running_run):
    client.force_login(owner)
    page = client.get(reverse("run-detail", args=[running_run.pk]))
    config = page.context["page_config"]
    assert config["run"] == running_run.pk and config["canSteer"] is True
    html = page.content.decode()
    assert 'id="direction-form"' in html and 'id="frontier-chart"' in html and 'id="parcoords-chart"' in html


@pytest.mark.django_db
def test_the_run_page_shows_what_was_evaluated_before_its_socket_connects(client, owner, evaluated_run):
    client.force_login(owner)
    html = client.get(reverse("run-detail", args=[evaluated_run.pk])).content.decode()
    done = evaluated_run.candidates.exclude(status__in=["queued", "running"])
    counts = {s: done.filter(status=s).count() for s in set(done.values_list("status", flat=True))}
    assert done.count() == 2
    assert '<strong id="run-evaluated">2</strong>' in html and 'value="2"></progress>' in html
    shown = re.search(r'<span id="run-counts" class="hint-inline">([^<]*)</span>', html).group(1)
    assert all(f"{s}: {n}" in shown.replace("&middot;", "·") for s, n in counts.items())


@pytest.mark.django_db
def test_a_direction_is_recorded_or_its_error_returned_in_place(client, owner, running_run):
    client.force_login(owner)
    url = reverse("run-direction", args=[running_run.pk])
    json_headers = {"HTTP_ACCEPT": "application/json"}
    bad = client.post(url, {"kind": "narrow", "param": "UNROLL", "values": "3"}, **json_headers)
    assert bad.status_code == 400 and "UNROLL has no value(s) [3]" in bad.json()["error"]
    word = client.post(url, {"kind": "narrow", "param": "UNROLL", "values": "two"}, **json_headers)
    assert word.status_code == 400 and "UNROLL has no value(s) ['two']" in word.json()["error"]
    empty = client.post(url, {"kind": "exclude", "param": "ACC_DOUBLE", "values": "0, 1"}, **json_headers)
    assert "without any value" in empty.json()["error"]
    good = client.post(url, {"kind": "narrow", "param": "UNROLL", "values": "1, 2"}, **json_headers)
    assert good.status_code == 201 and good.json()["direction"]["payload"] == {"param": "UNROLL", "values": [1, 2]}
    boost = client.post(url, {"kind": "boost_agent", "agent": "nobody"}, **json_headers)
    assert "no agent 'nobody'" in boost.json()["error"]
    without_js = client.post(url, {"kind": "add_restriction", "expression": "UNROLL >"})
    assert without_js.status_code == 400 and "restriction" in without_js.context["direction_error"]
    assert Direction.objects.filter(run=running_run).count() == 1


@pytest.mark.django_db
def test_a_viewer_cannot_steer(client, outsider, running_run):
    client.force_login(outsider)
    r = client.post(reverse("run-direction", args=[running_run.pk]), {"kind": "stop"})
    assert r.status_code == 403 and not Direction.objects.exists()


@pytest.mark.django_db
def test_accepting_a_suggested_restriction_submits_it_as_a_direction(client, owner, running_run):
    goal = running_run.goal
    rule = Insight.objects.create(workload=goal.workload, target=goal.target, kind=Insight.Kind.FAILURE_RULE,
                                  data={"rule": "VEC > 8", "status": "wrong_result", "support": 5, "precision": 1.0,
                                        "restriction": "not (VEC > 8)"})
    importance = Insight.objects.create(workload=goal.workload, target=goal.target, kind=Insight.Kind.IMPORTANCE,
                                        data={"importances": {"VEC": 1.0}})
    client.force_login(owner)
    json_headers = {"HTTP_ACCEPT": "application/json"}
    r = client.post(reverse("run-insight-accept", args=[running_run.pk, rule.pk]), **json_headers)
    assert r.status_code == 201
    d = Direction.objects.get()
    assert d.kind == "add_restriction" and d.payload == {"expression": "not (VEC > 8)"}
    r = client.post(reverse("run-insight-accept", args=[running_run.pk, importance.pk]), **json_headers)
    assert r.status_code == 400 and "suggests no restriction" in r.json()["error"]


# --- candidates and compare -----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_candidate_page_shows_lineage_validation_timing_and_roofline(client, owner, evaluated_run):
    candidate = evaluated_run.candidates.filter(status="ok").select_related("evidence").first()
    client.force_login(owner)
    page = client.get(reverse("candidate-detail", args=[candidate.pk]))
    html = page.content.decode()
    assert "Timing distribution" in html and "Roofline" in html and 'id="cases"' in html
    charts = page.context["charts"]
    assert set(charts["samples"]) == set(candidate.evidence.samples_ms)
    points = charts["roofline"]["points"]
    assert points and all(p["intensity"] > 0 and p["gflops"] > 0 for p in points)
    assert charts["roofline"]["ceilings"]["source"]
    assert '"entry_point": "rmsnorm"' in page.context["launch_plan"]
    static = client.get(reverse("api-candidate-static", args=[candidate.pk])).json()
    assert static == {"available": False, "reason": "static analysis applies to CUDA targets; this goal runs on cpu-x86_64"}


def _first_call_candidates():
    """Two evaluated candidates of one run: #a builds a table on its first call (5 ms, steady
    20 us on the first shape), #b has no set-up but a slower steady state."""
    import kernels
    from kernels.evaluation.first_call import first_call_metrics
    from swarm.models import Evidence

    goal = Goal.objects.create(name="first calls", workload="rmsnorm", target="cpu-x86_64", shape_set="test-small",
                               objectives=[{"metric": "latency_ms", "direction": "minimize"}],
                               space=kernels.default_space("rmsnorm").to_dict(), source=kernels.load_template("rmsnorm"))
    run = Run.objects.create(goal=goal, budget=2, seed=1, space=goal.space)
    s1, s2 = "rows=1,hidden=256", "rows=8,hidden=256"
    out = []
    for n, (steady, first) in enumerate([((0.02, 0.03), (5.0, 0.04)), ((0.03, 0.05), (0.05, 0.06))]):
        c = Candidate.objects.create(goal=goal, run=run, generation=1, agent="random", content_hash=f"{n}" * 64,
                                     params={"UNROLL": n + 1}, source=goal.source, status="ok")
        metrics = {"latency_ms": sum(steady), f"latency_ms[{s1}]": steady[0], f"latency_ms[{s2}]": steady[1],
                   "max_rel_error": 1e-7}
        metrics.update(first_call_metrics([(s1, first[0], steady[0]), (s2, first[1], steady[1])]))
        Evidence.objects.create(candidate=c, status="ok", metrics=metrics,
                                samples_ms={s1: [steady[0]] * 5, s2: [steady[1]] * 5})
        out.append(c)
    return run, out


@pytest.mark.django_db
def test_the_candidate_page_shows_the_first_call_beside_the_steady_state_and_the_flag(client, owner):
    run, (setup, plain) = _first_call_candidates()
    client.force_login(owner)
    page = client.get(reverse("candidate-detail", args=[setup.pk]))
    html = page.content.decode()
    assert 'id="first-calls"' in html and "First call and steady state" in html
    rows = {r["label"]: r for r in page.context["first_calls"]}
    assert list(rows) == ["rows=1,hidden=256", "rows=8,hidden=256"]
    assert rows["rows=1,hidden=256"]["steady_ms"] == 0.02 and rows["rows=1,hidden=256"]["first_ms"] == 5.0
    assert rows["rows=1,hidden=256"]["flagged"] and not rows["rows=8,hidden=256"]["flagged"]
    assert "<td class=\"num\">0.02 ms</td><td class=\"num\">5 ms</td><td class=\"num\">250.0x</td>" in html
    assert 'id="first-call-flag"' in html
    assert "first call 250x its steady state: set-up cost on first use" in html
    other = client.get(reverse("candidate-detail", args=[plain.pk])).content.decode()
    assert 'id="first-calls"' in other and 'id="first-call-flag"' not in other and "set-up cost" not in other
    # ranked by the steady state alone: the flagged candidate is still the best
    assert summaries.best(run, [setup, plain]) == setup


@pytest.mark.django_db
def test_per_shape_first_call_metrics_stay_out_of_whole_run_listings(owner):
    from swarm.web import comparison
    from swarm.web.api import exports

    run, (setup, plain) = _first_call_candidates()
    names = [r["name"] for r in comparison.metric_rows([setup, plain])]
    assert {"first_call_ms", "first_call_ratio", "first_call_flag", "latency_ms"} <= set(names)
    assert not any("[" in n for n in names)
    _, columns = exports._columns(run)
    assert "first_call_flag" in columns and not any("[" in n for n in columns)


@pytest.mark.django_db
def test_compare_shows_differences_and_stored_medians_without_a_pooled_verdict(client, owner, evaluated_run):
    a, b = evaluated_run.candidates.filter(status="ok").order_by("id")[:2]
    client.force_login(owner)
    page = client.get(reverse("compare"), {"ids": f"{a.pk},{b.pk}"})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="param-diff"' in html and 'id="metric-diff"' in html and "diff_header" in html
    # separate-process samples are shown as medians, labelled so, and never judged
    rows = page.context["stored_medians"]
    assert rows and all(len(r["medians"]) == 2 and all(m > 0 for m in r["medians"]) for r in rows)
    assert "separate processes" in html and 'id="stored-medians"' in html
    assert "timing" not in page.context
    for pooled in ("significantly faster", "Mann-Whitney", "no significant difference", "p(faster)"):
        assert pooled not in html, pooled
    assert "Measure paired" in html and "No paired comparison of these candidates yet" in html
    assert client.get(reverse("compare"), {"ids": f"{a.pk}"}).status_code == 400
    assert "no candidate 999999" in client.get(reverse("compare"), {"ids": f"{a.pk},999999"}).content.decode()
    assert client.get(reverse("compare"), {"ids": "x"}).status_code == 400
    for bad in (",,", "0,1", f"{a.pk},{2**64}", "99999999999999999999"):  # never a 500
        assert client.get(reverse("compare"), {"ids": bad}).status_code == 400, bad
    blank = client.get(reverse("compare"))  # the navigation link: the empty form, no error
    assert blank.status_code == 200 and b'role="alert"' not in blank.content and b'id="compare-form"' in blank.content


# --- promotion and production -----------------------------------------------------------------------


@dataclass
class Measured:
    """Stands in for ``kernels.Evidence`` in promotion tests."""

    status: str
    samples_ms: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    cases: list = field(default_factory=list)
    log: str = ""

    def to_dict(self) -> dict:
        return {"status": self.status, "metrics": self.metrics, "samples_ms": self.samples_ms, "cases": self.cases,
                "log": self.log, "fingerprint": {}}


def paired_timed(latency_by_candidate: dict[int, float], *, identical: bool = False, floor: float = 0.02):
    """A fake ``compare_paired``: 8 rounds whose ratio time(B) / time(A) is the ratio of the
    two candidates' latencies, with a 0.2% alternation (a spread, so the interval is real)."""

    def compare(workload, a, b, **kwargs):
        ms = {}
        for side, kernel in (("A", a), ("B", b)):
            ms[side] = next(v for cid, v in latency_by_candidate.items() if Candidate.objects.get(pk=cid).params == kernel.params)
        ratios = [ms["B"] / ms["A"] * (1 + 0.002 * (-1) ** k) for k in range(8)]
        v = judge_rounds(ratios, floor)
        return PairedComparison(verdict=v.verdict, ratio=v.ratio, ci=v.ci, p_value=v.p_value, noise_floor=floor,
                                floor_source="given", rounds=v.rounds, round_ratios=v.round_ratios,
                                rounds_needed=v.rounds_needed, why=v.why, median_a_ms=ms["A"], median_b_ms=ms["B"],
                                shapes={}, calls=[], identical=identical, fingerprint={}, duration_s=0.0)
    return compare


def timed(latency_by_candidate: dict[int, float], status: str = "ok"):
    """A fake evaluator: each candidate's samples around its latency (ms), 40 per shape."""
    rng = np.random.default_rng(0)

    def evaluate(workload, source, params, **kwargs):
        for cid, ms in latency_by_candidate.items():
            if params == Candidate.objects.get(pk=cid).params:
                samples = {"rows=7,hidden=33": list(ms * (1 + 0.02 * rng.random(40)))}
                return Measured(status, samples, {"latency_ms": ms, "max_rel_error": 1e-7},
                                [{"label": "rows=7", "seed": 1, "passed": status == "ok", "reason": "mismatch"}],
                                log=f"== verdict ==\n{status}: synthetic")
        raise AssertionError(f"unexpected candidate {params}")
    return evaluate


@pytest.mark.django_db
def test_promotion_puts_the_kernel_on_the_production_page_and_api(client, owner, evaluated_run):
    best = summaries.best(evaluated_run, list(evaluated_run.candidates.select_related("evidence")))
    client.force_login(owner)
    page = client.get(reverse("candidate-detail", args=[best.pk]))
    assert b"Promote to production" in page.content and b"rmsnorm" in page.content
    response = client.post(reverse("candidate-promote", args=[best.pk]), {"note": "first"})
    assert response.status_code == 302 and response["Location"] == reverse("production")
    req = PromotionRequest.objects.get()
    assert req.state == "validating" and "validating" in client.get(reverse("production")).content.decode()
    # what the worker on target.cpu-x86_64 runs: the real extended validation (fresh seeds)
    req = promotion.validate_request(req.pk, bench=promotion.kernels.BenchSettings(warmup_ms=1, rep_ms=5, min_reps=5, max_reps=20))
    assert req.state == "promoted", req.reason
    assert len(req.evidence["candidate"]) == promotion.EXTENDED_SEEDS
    assert len({e["fingerprint"]["seed"] for e in req.evidence["candidate"]}) == promotion.EXTENDED_SEEDS
    assert f"#{best.pk}" in client.get(reverse("production")).content.decode()
    api = client.get(reverse("api-production-kernel", args=["rmsnorm", "cpu-x86_64", "test-small"])).json()
    assert api["candidate"] == best.pk and api["params"] == best.params
    assert api["evidence"]["status"] == "ok" and api["evidence"]["metrics"]["latency_ms"] > 0
    assert "void rmsnorm(" in api["source"] and api["launch_plan"]["entry_point"] == "rmsnorm"
    assert api["validation"]["candidate"][0]["status"] == "ok"
    assert AuditEvent.objects.filter(verb="promotion.create").count() == 1
    assert AuditEvent.objects.filter(verb="promotion.request").count() == 1


@pytest.mark.django_db
def test_a_viewer_cannot_promote(client, outsider, evaluated_run):
    candidate = evaluated_run.candidates.filter(status="ok").first()
    client.force_login(outsider)
    response = client.post(reverse("candidate-promote", args=[candidate.pk]), follow=True)
    assert "lacks the approve_promotion permission" in response.content.decode()
    assert not Promotion.objects.exists() and not PromotionRequest.objects.exists()


@pytest.mark.django_db
def test_a_promotion_needs_to_be_faster_than_the_incumbent_beyond_the_noise_floor(client, owner, evaluated_run):
    a, b = evaluated_run.candidates.filter(status="ok").order_by("id")[:2]
    first = promotion.promote(a, owner, "first", evaluate=timed({a.pk: 1.0}))
    assert first.active and first.evidence["incumbent"] is None and first.evidence["comparison"] is None
    # B is as fast as A: refused, and the page says exactly why
    req = promotion.request_promotion(b, owner, "same", dispatch=False)
    req = promotion.validate_request(req.pk, evaluate=timed({a.pk: 1.0, b.pk: 1.0}),
                                     compare=paired_timed({a.pk: 1.0, b.pk: 1.0}))
    assert req.state == "refused"
    assert req.reason.startswith("not faster than the incumbent beyond the noise floor: ratio 1.000 (CI 0.998-1.002), "
                                 "floor 2.0%, 8 rounds"), req.reason
    comparison = req.evidence["comparison"]
    assert comparison["protocol"] == "paired" and comparison["verdict"] == "tie" and comparison["faster"] is False
    assert req.evidence["protocol"]["order"] == "C C I"  # the incumbent re-validated once; speed from the pairs
    client.force_login(owner)
    assert "not faster than the incumbent beyond the noise floor" in client.get(reverse("production")).content.decode()
    # B is 20% faster: promoted, A kept in the history
    req = promotion.request_promotion(b, owner, "faster", dispatch=False)
    req = promotion.validate_request(req.pk, evaluate=timed({a.pk: 1.2, b.pk: 1.0}),
                                     compare=paired_timed({a.pk: 1.2, b.pk: 1.0}))
    assert req.state == "promoted", req.reason
    assert "faster than the incumbent (candidate" in req.reason and "ratio 0.833" in req.reason
    first.refresh_from_db()
    assert not first.active and first.end_reason == "superseded"
    current = Promotion.objects.get(active=True)
    assert current.candidate == b and current.replaced == first
    assert current.evidence["comparison"]["verdict"] == "b_faster"
    assert current.evidence["comparison"]["speedup"] == pytest.approx(1.2, rel=0.01)
    # the production API returns the paired verdict
    api = client.get(reverse("api-production-kernel", args=["rmsnorm", "cpu-x86_64", "test-small"])).json()
    verdict = api["comparison"]
    assert verdict["protocol"] == "paired" and verdict["verdict"] == "b_faster"
    assert verdict["ratio"] == pytest.approx(1 / 1.2, rel=0.01) and verdict["noise_floor"] == 0.02
    assert verdict["rounds"] == 8 and verdict["ci"][0] <= verdict["ratio"] <= verdict["ci"][1]


@pytest.mark.django_db
def test_a_promotion_that_fails_the_extended_validation_is_refused_with_the_failing_case(owner, evaluated_run):
    a = evaluated_run.candidates.filter(status="ok").first()
    req = promotion.request_promotion(a, owner, "", dispatch=False)
    req = promotion.validate_request(req.pk, evaluate=timed({a.pk: 1.0}, status="wrong_result"))
    assert req.state == "refused" and not Promotion.objects.exists()
    assert "extended validation failed" in req.reason and "wrong_result" in req.reason and "failing cases" in req.reason
    assert AuditEvent.objects.filter(verb="promotion.refused").exists()


@pytest.mark.django_db
def test_a_promotion_whose_extended_validation_meets_invalid_input_fails_without_blaming_the_candidate(owner, evaluated_run):
    a = evaluated_run.candidates.filter(status="ok").first()
    req = promotion.request_promotion(a, owner, "", dispatch=False)
    req = promotion.validate_request(req.pk, evaluate=timed({a.pk: 1.0}, status="invalid_input"))
    assert req.state == "failed" and not Promotion.objects.exists()
    assert "could not judge the candidate" in req.reason and "workload's inputs are invalid" in req.reason
    assert AuditEvent.objects.filter(verb="promotion.failed").exists()


@pytest.mark.django_db
def test_only_one_request_per_key_validates_at_a_time(owner, evaluated_run):
    a, b = evaluated_run.candidates.filter(status="ok").order_by("id")[:2]
    promotion.request_promotion(a, owner, dispatch=False)
    with pytest.raises(promotion.PromotionRefused, match="still validating"):
        promotion.request_promotion(b, owner, dispatch=False)


@pytest.mark.django_db
def test_an_approver_rolls_back_and_a_viewer_cannot(client, owner, outsider, evaluated_run):
    a, b = evaluated_run.candidates.filter(status="ok").order_by("id")[:2]
    promotion.promote(a, owner, evaluate=timed({a.pk: 1.0}))
    promotion.promote(b, owner, evaluate=timed({a.pk: 1.5, b.pk: 1.0}), compare=paired_timed({a.pk: 1.5, b.pk: 1.0}))
    url = reverse("production-rollback", args=["rmsnorm", "cpu-x86_64", "test-small"])
    client.force_login(outsider)
    assert "lacks the approve_promotion" in client.post(url, follow=True).content.decode()
    assert Promotion.objects.get(active=True).candidate == b
    client.force_login(owner)
    client.post(url)
    current = Promotion.objects.get(active=True)
    assert current.candidate == a and current.kind == "rollback"
    assert Promotion.objects.get(candidate=b).end_reason == "rolled_back"
    page = client.get(reverse("production")).content.decode()
    assert "promotion.rollback" in page and 'id="audit-log"' in page
    # rolling back past the oldest kernel says why not
    Promotion.objects.filter(pk=current.pk).update(replaced=None)
    assert "replaced nothing" in client.post(url, follow=True).content.decode()


@pytest.mark.django_db
def test_the_production_api_says_when_nothing_is_promoted(client, owner):
    client.force_login(owner)
    assert client.get(reverse("api-production-kernel", args=["rmsnorm", "cpu-x86_64", "x"])).status_code == 404
    assert client.get(reverse("api-production")).json() == {"kernels": []}


@pytest.mark.django_db
def test_a_cuda_candidate_shows_its_static_resources_and_ptx(client, owner):
    import os
    import shutil

    import kernels

    if not (shutil.which("nvcc") or os.environ.get("KERNELS_NVCC")):
        pytest.skip("needs nvcc (static analysis only; no GPU)")
    space = kernels.default_space("rmsnorm", "cuda")
    goal = Goal.objects.create(name="cuda", workload="rmsnorm", target="cuda-sm90", shape_set="test-small",
                               objectives=[{"metric": "latency_ms", "direction": "minimize"}],
                               space=space.to_dict(), source=kernels.load_template("rmsnorm", "cuda"))
    run = Run.objects.create(goal=goal, budget=1, seed=1, space=goal.space)
    params = {"BLOCK_SIZE": 256, "THREADS_PER_ROW": 32, "VEC": 4, "UNROLL": 1, "USE_SMEM": 0}
    c = Candidate.objects.create(goal=goal, run=run, generation=1, agent="random", content_hash="c" * 64,
                                 params=params, source=goal.source)
    client.force_login(owner)
    page = client.get(reverse("candidate-detail", args=[c.pk])).content.decode()
    assert "Static resources and PTX" in page and "rmsnorm_kernel" in page  # the launch plan
    static = client.get(reverse("api-candidate-static", args=[c.pk])).json()
    assert static["available"], static
    assert static["summary"]["kernels"]["rmsnorm_kernel"]["registers"] > 0
    assert static["summary"]["launches"] and 0 < static["summary"]["launches"][0]["occupancy"] <= 1
    assert ".entry rmsnorm_kernel" in static["ptx"] or ".visible .entry" in static["ptx"]
