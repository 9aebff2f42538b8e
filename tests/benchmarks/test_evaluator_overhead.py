"""The evaluator-overhead benchmark's budgets and its fixed + per-second fit, on rows whose
answer is known (the measurements themselves need a compiler and time: not a unit test)."""

import pytest

from benchmarks import evaluator_overhead as eo
from kernels.timing import BenchSettings


def _row(rep_ms, work_s, ev_work_s, compile_s=0.4, params=None):
    return {"workload": "gemm", "shape_set": "square-1024", "params": params or {"MR": 4}, "rep_ms": rep_ms,
            "work_s": work_s, "ev_work_s": ev_work_s, "compile_s": compile_s}


def test_budget_scales_the_cap_on_calls_with_the_time():
    base = BenchSettings()
    assert eo.budget(base.rep_ms) == base
    long = eo.budget(4 * base.rep_ms)
    assert long.rep_ms == 4 * base.rep_ms and long.max_reps == 4 * base.max_reps
    assert long.warmup_ms == base.warmup_ms and long.min_reps == base.min_reps
    assert eo.budget(base.rep_ms / 10).max_reps == base.max_reps  # never below the default's


def test_fit_recovers_fixed_cost_and_slope_and_the_break_even_work():
    fixed, slope, c = 0.5, 1.05, 0.4
    rows = [_row(ms, w, fixed + slope * w, c) for ms, w in ((150, 0.2), (600, 0.8), (1500, 2.0))]
    rows.append(_row(150, 0.2, 0.7, params={"MR": 8}))  # one budget only: no fit
    [f] = eo.fit(rows)
    assert f["fixed_s"] == pytest.approx(fixed) and f["slope"] == pytest.approx(slope)
    x = f["breakeven_work_s"]
    # At the break-even work the overhead (same compile on both sides) is exactly the target.
    assert 100 * (fixed + slope * x - x) / (c + x) == pytest.approx(eo.TARGET_PCT)
    assert "| gemm | square-1024 | MR=4 | 0.50 | +5% | 0.40 |" in eo.fit_markdown([f])


def test_a_slope_above_the_target_never_breaks_even():
    rows = [_row(ms, w, 0.1 + 1.5 * w) for ms, w in ((150, 0.2), (600, 0.8))]
    [f] = eo.fit(rows)
    assert f["slope"] == pytest.approx(1.5) and f["breakeven_work_s"] is None
    assert eo.fit_markdown([f]).rstrip().endswith("| - |")
