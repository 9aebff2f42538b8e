"""Pruning a hopeless candidate's timing, and cancelling an evaluation (kernels.evaluation.pruning)."""

import pytest

from kernels import Outcome, evaluate
from kernels.evaluation.pruning import PRUNE_AFTER_CALLS, Prune, judge_report, verdict
from kernels.evaluation.timing import BenchSettings, bench_run

pytestmark = pytest.mark.timeout(90)

# A correct RMSNorm that spins for SPIN_MS of wall clock per call (a slow candidate).
SLOW_C = r"""
#include <math.h>
#include <time.h>
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)
{
    double until = now_ms() + SPIN_MS;
    while (now_ms() < until) { }
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden;
        float *yr = y + (long)r * hidden;
        double s = 0.0;
        for (int i = 0; i < hidden; ++i) s += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(s / hidden + eps));
        for (int i = 0; i < hidden; ++i) yr[i] = xr[i] * inv * w[i];
    }
}
"""
LABELS = ("rows=1,hidden=256", "rows=8,hidden=256")
BENCH = BenchSettings(warmup_ms=1.0, rep_ms=2.0, min_reps=5, max_reps=8, flush_bytes=1 << 20)


def slow(spin_ms, **kw):
    kw.setdefault("timeout_s", 40)
    return evaluate("rmsnorm", SLOW_C, {"SPIN_MS": spin_ms}, shape_set="test-small", bench=BENCH, seed=5, **kw)


def test_the_rule_needs_enough_calls_and_a_limit():
    assert verdict([9.0, 9.0], [], None) is None
    assert verdict([9.0], [], 1.0) is None  # the first call alone decides nothing (set-up cost)
    assert "warm-up" in verdict([9.0, 5.0], [], 1.0)
    assert verdict([9.0, 0.5], [], 1.0) is None
    assert verdict([0.5, 0.5, 0.5], [5.0] * (PRUNE_AFTER_CALLS - 1), 1.0) is None
    assert "timed calls" in verdict([0.5, 0.5, 0.5], [5.0] * PRUNE_AFTER_CALLS, 1.0)
    assert verdict([0.5, 0.5, 0.5], [5.0, 0.9, 0.9], 1.0) is None  # the median decides


@pytest.mark.parametrize("bad", [dict(factor=1.0), dict(factor=float("nan")), dict(factor=3, shape_ms={"a": 0}),
                                 dict(factor=3, timing_wall_s=-1.0), dict(factor=True)])
def test_bad_prune_settings_are_refused(bad):
    with pytest.raises(ValueError, match="Prune"):
        Prune(**bad)


def test_the_timing_loop_stops_at_the_first_call_that_shows_the_limit_passed():
    calls = []

    def fn():
        calls.append(1)

    run = bench_run(fn, BenchSettings(warmup_ms=0, rep_ms=0, min_reps=20, max_reps=20), prune_ms=-1.0)
    assert run.pruned and run.samples_ms == [] and len(run.warm_ms) == 2 == len(calls)
    full = bench_run(fn, BenchSettings(warmup_ms=0, rep_ms=0, min_reps=20, max_reps=20), prune_ms=1e9)
    assert full.pruned is None and len(full.samples_ms) == 20


def test_a_prune_report_is_accepted_only_when_its_calls_show_it():
    prune = Prune(3.0, {LABELS[0]: 1.0, LABELS[1]: 2.0})
    labels = {"t0": LABELS[0], "t1": LABELS[1]}
    good = {"pruned": {"item": "t1"}, "timed": {"t0": {"samples_ms": [1.0, 1.2, 1.1], "warm_ms": [3, 1, 1]},
                                                 "t1": {"samples_ms": [], "warm_ms": [20.0, 9.0]}}}
    reason, metrics, samples = judge_report(good, labels, prune)
    assert metrics["prune_ratio"] == 4.5 and metrics[f"latency_ms[{LABELS[0]}]"] == 1.1
    assert "latency_ms" not in metrics and samples == {LABELS[0]: [1.0, 1.2, 1.1]} and LABELS[1] in reason
    forged = {"pruned": {"item": "t1"}, "timed": {"t1": {"samples_ms": [], "warm_ms": [20.0, 5.0]}}}
    with pytest.raises(ValueError, match="do not show"):
        judge_report(forged, labels, prune)
    with pytest.raises(ValueError, match="not timed"):
        judge_report({"pruned": {"item": "t9"}, "timed": {}}, labels, prune)
    with pytest.raises(ValueError, match="non-negative"):
        judge_report({"pruned": {"item": "t1"}, "timed": {"t1": {"samples_ms": ["x"], "warm_ms": []}}}, labels, prune)


def test_a_candidate_slower_than_k_times_the_incumbent_is_pruned_with_its_calls_so_far():
    ev = slow(20, prune=Prune(3.0, {label: 0.5 for label in LABELS}))
    assert ev.status == Outcome.pruned, ev.log
    assert ev.metrics["prune_ratio"] > 3 and "latency_ms" not in ev.metrics
    assert all(c["passed"] for c in ev.cases) and ev.cases  # validated before it was timed
    assert f"pruned at {LABELS[0]}" in ev.log and "warm-up calls" in ev.log


def test_a_candidate_within_k_times_the_incumbent_is_timed_in_full():
    ev = slow(1, prune=Prune(3.0, {label: 50.0 for label in LABELS}))
    assert ev.status == Outcome.ok, ev.log
    assert ev.metrics["latency_ms"] > 0 and "prune_ratio" not in ev.metrics


def test_the_parent_stops_a_timing_child_past_k_times_the_incumbents_wall_time():
    # No per-shape limit: only the parent's wall clock can stop it (each call spins 0.6 s).
    ev = slow(600, prune=Prune(3.0, {}, timing_wall_s=0.1, slack_s=0.2))
    assert ev.status == Outcome.pruned, ev.log
    assert "wall clock" in ev.log and ev.metrics["pruned_after_s"] > 0.5


def test_a_cancelled_evaluation_stops_its_child():
    asked = []

    def cancelled():  # asked before and after compiling, then while the child runs: cancel there
        asked.append(1)
        return len(asked) > 2

    ev = slow(3000, cancelled=cancelled)
    assert ev.status == Outcome.cancelled, ev.log
    assert "cancelled during" in ev.log and not Outcome.cancelled.judged


def test_a_cancel_before_it_runs_compiles_nothing():
    ev = slow(1, cancelled=lambda: True)
    assert ev.status == Outcome.cancelled and "before it was compiled" in ev.log


def test_calls_under_a_millisecond_are_never_pruned():
    prune = Prune(3.0, {"a": 0.001, "b": 2.0})
    assert prune.limit_ms("a") == 1.0 and prune.limit_ms("b") == 6.0 and prune.limit_ms("c") is None
    assert verdict([0.5, 0.5], [], prune.limit_ms("a")) is None  # 500 x the incumbent, but 0.5 ms
