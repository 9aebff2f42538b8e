"""Engine goals (plans as swarm candidates) and the engine pages."""

import pytest
from django.urls import reverse

from engines.goals import engine_space, evaluate_plan, parse_goal_workload
from kernels import Outcome
from swarm.engine_registry import goals as swarm_goals
from swarm.engine_registry.goals import create_engine_goal
from swarm.engine_registry.guard import check_kernel_promotion
from swarm.engine_registry.models import EngineBenchmark, GuardCheck, ProductionEngine
from swarm.engine_registry.services import record_benchmark
from swarm.runs import orchestrator, summaries

pytestmark = pytest.mark.timeout(600)


def test_a_plan_is_evaluated_like_a_kernel():
    from engines._binding import NoProduction

    ev = evaluate_plan(registry=NoProduction(), workload="engine:llama-layer:small", source="", params={"FUSE_QKV": 0},
                       shape_set="decode+prefill", reps=3)
    assert ev.status == Outcome.ok, ev.log
    assert ev.metrics["latency_ms"] == pytest.approx(ev.metrics["latency_ms[decode]"] + ev.metrics["latency_ms[prefill]"])
    assert ev.metrics["max_rel_error"] <= 1e-4 and ev.metrics["throughput"] > 0
    assert set(ev.samples_ms) == {"decode", "prefill"} and ev.fingerprint["kernels"]["gemm"] == "baseline"
    bad = evaluate_plan("engine:llama-layer:small", "", {"FUSE_QKV": 7}, shape_set="decode", registry=NoProduction())
    assert bad.status == Outcome.invalid and "must be one of" in bad.log


def test_the_plan_space_holds_fusions_batch_size_and_kernel_choices():
    space = engine_space("minilm")
    assert {"FUSE_QKV", "FUSE_BIAS_GELU", "BATCH_SIZE", "BUFFER_REUSE", "KERNEL_GEMM_BIAS", "KERNEL_ATTENTION"} <= set(space.names)
    assert parse_goal_workload("engine:kda-layer:small") == ("kda-layer", "small")


@pytest.mark.django_db
def test_an_engine_goal_runs_through_the_orchestrator(owner):
    goal = create_engine_goal("kda-layer", config="small", scenarios=("decode",), user=owner)
    assert goal.workload == "engine:kda-layer:small" and goal.objectives[0]["metric"] == "latency_ms"
    run, cands = orchestrator.start_run(goal, budget=2, batch_size=2, seed=3, agents=[{"name": "random", "kind": "random"}])
    assert cands
    for c in cands:
        done = orchestrator.evaluate_candidate(c.pk, evaluate=lambda *a, **kw: swarm_goals.evaluate_plan(*a, reps=3, **kw))
        assert done.status == "ok", done.evidence.log
        assert done.evidence.metrics["latency_ms"] > 0
    summary = summaries.run_summary(run)
    assert summary["best"] is not None and summary["frontier"]


@pytest.fixture
def engine_with_history(db):
    pe = ProductionEngine.objects.create(name="llama-layer-small/cpu-x86_64", engine="llama-layer", config="small",
                                         plan={})
    record_benchmark(pe, reps=2)
    pe.plan = {"FUSE_QKV": 0, "FUSE_GATE_UP": 0}
    pe.save()
    record_benchmark(pe, reps=2, label="unfused plan")
    return pe


@pytest.mark.django_db
def test_the_engine_pages_show_graph_kernels_history_breakdown_and_comparison(client, owner, engine_with_history):
    pe = engine_with_history
    client.force_login(owner)
    page = client.get(reverse("engine-list")).content.decode()
    assert pe.name in page and "Engine guard" in page
    page = client.get(reverse("engine-detail", args=[pe.pk])).content.decode()
    for text in ("q_proj", "gate_proj", "fused_add_rmsnorm", "decode_attention", "baseline", "/static/plotly/plotly.min.js",
                 "history-chart", "breakdown-chart", "history-data", "none promoted"):
        assert text in page, text
    a, b = pe.benchmarks.order_by("id")
    page = client.get(reverse("engine-compare", args=[pe.pk]) + f"?a={a.pk}&b={b.pk}").content.decode()
    assert "FUSE_QKV" in page and 'class="differs"' in page and "compare-chart" in page
    assert client.get(reverse("engine-compare", args=[pe.pk]) + "?a=1").status_code == 404
    assert client.get("/static/engines/engines.js").status_code == 200


@pytest.mark.django_db
def test_a_blocked_check_is_overridden_from_the_page_with_a_reason(client, owner, engine_with_history):
    from tests.engines.test_guard import WRONG_ON_WIDE, make_candidate

    cand = make_candidate(owner, WRONG_ON_WIDE)
    check = check_kernel_promotion(cand, runner=lambda req: {"error": "boom"}).check
    client.force_login(owner)
    page = client.get(reverse("engine-list")).content.decode()
    assert f"guard-check-{check.pk}" in page and "blocked" in page and "Override with this reason" in page
    r = client.post(reverse("engine-guard-override", args=[check.pk]), {"reason": "no", "next": "/engines/"})
    assert r.status_code == 302 and not GuardCheck.objects.get(pk=check.pk).allows_promotion
    client.post(reverse("engine-guard-override", args=[check.pk]), {"reason": "accepted: the engine is being retired"})
    assert GuardCheck.objects.get(pk=check.pk).allows_promotion


def test_engine_pages_need_sign_in(client):
    assert client.get(reverse("engine-list")).status_code == 302


@pytest.mark.django_db
def test_manage_py_engine_register_and_bench_record(owner):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("engine", "register", "--engine", "kda-layer", "--config", "small", stdout=out)
    pe = ProductionEngine.objects.get(name="kda-layer-small/cpu-x86_64")
    assert pe.plan["FUSE_QKV"] == 1 and "registered" in out.getvalue()
    call_command("engine", "bench", "--record", pe.name, "--reps", "2", stdout=out)
    b = EngineBenchmark.objects.get(engine=pe)
    assert b.status == "ok" and b.metrics["decode_ms"] > 0 and b.graph["prefill"] and b.breakdown["decode"]


@pytest.mark.django_db
def test_a_promoted_engine_plan_becomes_the_production_engines_plan():
    from swarm.models import Candidate, Run
    from swarm.production.promotion import _adopt_engine_plan

    goal = create_engine_goal("llama-layer", config="small")
    run = Run.objects.create(goal=goal, budget=1, seed=1, space=goal.space, constraints=goal.constraints)
    params = {p["name"]: p["values"][-1] for p in goal.space["parameters"]}
    candidate = Candidate.objects.create(goal=goal, run=run, generation=1, agent="random", content_hash="e" * 64,
                                         params=params, source="", status="ok")
    engine = ProductionEngine.objects.create(name="llama/cpu", engine="llama-layer", config="small", target=goal.target)
    other = ProductionEngine.objects.create(name="kda/cpu", engine="kda-layer", config="small", target=goal.target)
    _adopt_engine_plan(candidate, goal.target)
    engine.refresh_from_db()
    other.refresh_from_db()
    assert engine.plan == params and engine.plan_candidate == candidate
    assert other.plan == {}
