"""The cross-layer guard: promoting a kernel re-validates and re-benchmarks the production
engines that use its workload; a wrong kernel is blocked with evidence; an approver may
override only with a written reason, which is audited."""

import pytest

from engines._isolated import GuardSettings
from kernels import load_template
from swarm.engine_registry import guard
from swarm.engine_registry.models import EngineBenchmark, GuardCheck, ProductionEngine
from swarm.models import AuditEvent, Candidate, Evidence, Goal, Promotion, Run

pytestmark = [pytest.mark.timeout(600), pytest.mark.django_db]

QUICK = GuardSettings(rounds=3, min_calls=3, round_ms=10.0, noise_floor=0.5)

# Correct on the sandbox's small shapes (N <= 64), wrong on wide outputs: only an engine
# that uses the kernel at its real shapes shows it.
WRONG_ON_WIDE = load_template("gemm").replace(
    "void gemm(const float *restrict A", "static void gemm_impl(const float *restrict A"
) + """
void gemm(const float *A, const float *B, float *C, int M, int N, int K)
{
    gemm_impl(A, B, C, M, N, K);
    if (N > 512)
        for (int m = 0; m < M; ++m)
            C[(long)m * N + N - 1] *= 0.5f;
}
"""


def make_candidate(owner, source, params=None, workload="gemm"):
    goal, _ = Goal.objects.get_or_create(
        name=f"{workload} guard test", workload=workload, target="cpu-x86_64", shape_set="test-small",
        defaults=dict(objectives=[{"metric": "latency_ms", "direction": "minimize"}], constraints=[],
                      space={"parameters": [{"name": "MR", "values": [1, 4]}], "restrictions": []}, source=source))
    run = Run.objects.create(goal=goal, budget=10, seed=1, space=goal.space)
    n = Candidate.objects.count()
    c = Candidate.objects.create(goal=goal, run=run, generation=1, agent="random", content_hash=f"h{n}",
                                 params=params or {}, source=source, status="ok")
    Evidence.objects.create(candidate=c, status="ok", metrics={"latency_ms": 0.01, "max_rel_error": 1e-7})
    return c


@pytest.fixture
def llama_engine(db):
    return ProductionEngine.objects.create(name="llama-layer-small/cpu-x86_64", engine="llama-layer", config="small",
                                           target="cpu-x86_64", plan={})


def test_a_wrong_kernel_is_blocked_with_the_evidence(owner, llama_engine):
    cand = make_candidate(owner, WRONG_ON_WIDE)
    res = guard.check_kernel_promotion(cand, settings=QUICK)
    assert not res.ok
    assert "blocked" in res.reason and "wrong output" in res.reason and llama_engine.name in res.reason
    ev = res.evidence["engines"][llama_engine.name]
    assert ev["verdict"] == "wrong_result"
    assert ev["result"]["challenger_validation"]["max_rel_error"] > 1e-3
    bad = [r for r in ev["result"]["challenger_validation"]["operators"] if r["status"] != "ok"]
    assert bad and all(r["workload"] == "gemm" and r["shape"]["N"] > 512 for r in bad)
    assert ev["result"]["incumbent_validation"]["status"] == "ok"
    check = GuardCheck.objects.get(candidate=cand)
    assert not check.ok and not check.allows_promotion
    assert guard.promotion_allowed(cand) == (False, check)
    assert EngineBenchmark.objects.filter(engine=llama_engine, trigger="guard", status="wrong_result").exists()


def test_a_correct_kernel_passes_and_replaces_nothing_it_should_not(owner, llama_engine):
    incumbent = make_candidate(owner, load_template("rmsnorm"), workload="rmsnorm")
    Promotion.objects.create(candidate=incumbent, workload="rmsnorm", target="cpu-x86_64", shape_set="test-small")
    cand = make_candidate(owner, load_template("rmsnorm"), params={"ACC_DOUBLE": 1}, workload="rmsnorm")
    res = guard.check_kernel_promotion(cand, settings=QUICK)
    assert res.ok, res.reason
    ev = res.evidence["engines"][llama_engine.name]
    assert ev["verdict"] == "ok" and {"prefill", "decode"} <= set(ev["comparisons"])
    assert {"rmsnorm rows=24,hidden=256", "rmsnorm rows=1,hidden=256"} <= set(ev["comparisons"])  # per operator
    assert "production" in ev["result"]["incumbent_validation"]["kernels"]["rmsnorm"]
    assert "candidate" in ev["result"]["challenger_validation"]["kernels"]["rmsnorm"]
    assert ev["shapes"] == [{"hidden": 256}]
    assert guard.promotion_allowed(cand)[0]


def test_a_passed_check_lets_the_engine_bind_the_kernel_at_the_shapes_it_checked(owner, llama_engine):
    from engines.llama import LlamaLayer
    from swarm.engine_registry.registry import DbRegistry

    cand = make_candidate(owner, load_template("gemm"))  # its goal's shape set: test-small (N=64, K=128)
    Promotion.objects.create(candidate=cand, workload="gemm", target="cpu-x86_64", shape_set="test-small")
    eng = LlamaLayer("small", registry=DbRegistry())
    rows = [r for r in eng.describe(eng.plan({}), ("decode",))["decode"] if r["workload"] == "gemm"]
    assert rows and all(r["kernel"]["kind"] == "baseline" for r in rows)
    assert "test-small" in rows[0]["kernel"]["note"] and "N=384,K=256" in rows[0]["kernel"]["note"]
    shapes = [{"N": 384, "K": 256}, {"N": 256, "K": 256}, {"N": 1792, "K": 256}, {"N": 256, "K": 896}]
    GuardCheck.objects.create(candidate=cand, workload="gemm", target="cpu-x86_64", ok=False, reason="blocked",
                              evidence={"engines": {llama_engine.name: {"shapes": shapes}}})
    eng = LlamaLayer("small", registry=DbRegistry())
    assert all(r["kernel"]["kind"] == "baseline" for r in eng.describe(eng.plan({}), ("decode",))["decode"]
               if r["workload"] == "gemm")  # a blocked check validates nothing
    GuardCheck.objects.create(candidate=cand, workload="gemm", target="cpu-x86_64", ok=True, reason="passed",
                              evidence={"engines": {llama_engine.name: {"shapes": shapes}}})
    eng = LlamaLayer("small", registry=DbRegistry())
    rows = [r for r in eng.describe(eng.plan({}), ("decode",))["decode"] if r["workload"] == "gemm"]
    assert all(r["kernel"]["kind"] == "production" and r["kernel"]["candidate"] == cand.pk for r in rows)
    assert "validated and benchmarked" in rows[0]["kernel"]["note"]


def test_engines_that_do_not_run_the_production_kernel_are_not_affected(owner, llama_engine):
    llama_engine.plan = {"KERNEL_GEMM": 0}
    llama_engine.save()
    res = guard.check_kernel_promotion(make_candidate(owner, WRONG_ON_WIDE), runner=lambda req: pytest.fail("ran"))
    assert res.ok and "no production engine runs" in res.reason


def test_a_crashing_candidate_is_blocked(owner, llama_engine):
    crash = "void gemm(const float *A, const float *B, float *C, int M, int N, int K) { *(volatile int *)0 = 1; }"
    res = guard.check_kernel_promotion(make_candidate(owner, crash), settings=QUICK)
    assert not res.ok and res.evidence["engines"][llama_engine.name]["verdict"] == "error"


def test_a_slowdown_beyond_noise_blocks(owner, llama_engine):
    from kernels.comparison.verdict import judge_rounds

    def slow_runner(req):
        val = {"status": "ok", "max_rel_error": 1e-6, "kernels": {}, "operators": []}
        v = judge_rounds([1.3, 1.31, 1.29, 1.32], 0.02)
        item = {"kind": "scenario", "verdict": v.verdict, "ratio": v.ratio, "why": v.why,
                "median_incumbent_ms": 1.0, "median_challenger_ms": 1.3}
        return {"challenger_validation": val, "incumbent_validation": val, "shapes": [{"N": 1, "K": 1}],
                "timing": {"items": {"decode": item}}}

    res = guard.check_kernel_promotion(make_candidate(owner, load_template("gemm")), runner=slow_runner)
    assert not res.ok and "slower beyond noise" in res.reason and "1.305x A's time" in res.reason
    assert res.evidence["engines"]["llama-layer-small/cpu-x86_64"]["shapes"] == []  # not validated: no shapes


def test_an_override_needs_an_approver_and_a_written_reason_and_is_audited(owner, outsider, llama_engine):
    cand = make_candidate(owner, WRONG_ON_WIDE)
    res = guard.check_kernel_promotion(cand, runner=lambda req: {"error": "boom"})
    check = res.check
    with pytest.raises(guard.GuardOverrideRefused, match="only an approver"):
        guard.override(check, outsider, "because I want it in production")
    with pytest.raises(guard.GuardOverrideRefused, match="written reason"):
        guard.override(check, owner, "  ok ")
    guard.override(check, owner, "Known regression in the engine; fixed by the next layer kernel.")
    check.refresh_from_db()
    assert check.allows_promotion and check.overridden_by == owner
    event = AuditEvent.objects.get(verb="engine_guard.override")
    assert event.actor == owner and "next layer kernel" in event.data["reason"] and "boom" in event.data["blocked_because"]
    assert guard.promotion_allowed(cand)[0]
    again = guard.guard_promotion(cand, runner=lambda req: pytest.fail("an overridden check is not re-run"))
    assert again.ok and "overridden by owner" in again.reason and again.check == check
    with pytest.raises(guard.GuardOverrideRefused, match="already overridden"):
        guard.override(check, owner, "once more, with feeling")
