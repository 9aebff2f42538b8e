"""The evaluator-overhead benchmark's budgets and its fixed + per-second fit, on rows whose
answer is known (the measurements themselves need a compiler and time: not a unit test)."""

import numpy as np
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


def test_flush_cost_times_both_flushes_and_leaves_the_outputs_nan():
    from kernels.timing import Evictor, evict_library

    x = np.ones(4096, np.float32)
    y = np.zeros(4096, np.float32)
    calls = []
    f = eo.flush_cost(lambda: calls.append(y.__setitem__(slice(None), 1.0)), [x, y], [y], Evictor(evict_library()), n=5)
    assert len(calls) == 10 and np.isnan(y).all() and (x == 1).all()
    assert f["output_bytes"] == y.nbytes and f["bytes"] == x.nbytes + y.nbytes
    assert f["evict_us"] > 0 and f["fill_evict_us"] > 0


def test_flush_table_relates_the_fill_to_the_kernel_time():
    row = {"workload": "rmsnorm", "median_ms": {"rows=512,hidden=4096": 0.4},
           "flush_us": {"rows=512,hidden=4096": {"output_bytes": 8 * 2**20, "bytes": 16 * 2**20,
                                                 "evict_us": 200.0, "fill_evict_us": 500.0}}}
    table = eo.flush_markdown([row, dict(row)])  # one line per workload and shape
    assert table.count("rows=512") == 1
    assert "| rmsnorm | rows=512,hidden=4096 | 0.400 | 8.00 / 16.00 | 200 | 500 | +50% |" in table


@pytest.mark.parametrize("argv", [["--rep-ms", "0"], ["--rep-ms", "nan"], ["--rep-ms", "150", "x"],
                                  ["--repeats", "0"]])
def test_bad_arguments_are_usage_errors_before_anything_runs(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        eo.main(argv)
    assert exc.value.code == 2 and "error: argument" in capsys.readouterr().err
