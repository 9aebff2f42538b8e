"""The evaluator-overhead benchmark's budgets, tables and fixed + per-second fit, on rows whose
answer is known (the measurements themselves need a compiler and time: not a unit test)."""

import numpy as np
import pytest

from benchmarks import evaluator_overhead as eo
from kernels.timing import BenchSettings


def _row(rep_ms, work_s, ev_s, compile_s=0.4, params=None, status="ok"):
    """A measured row: bare = compile + work, evaluator = ev_s in all (its own compile inside)."""
    row = {"workload": "gemm", "shape_set": "square-1024", "params": params or {"MR": 4}, "rep_ms": rep_ms,
           "status": status, "evaluator_s": ev_s, "compile_s": compile_s, "bare_s": compile_s + work_s}
    if status == "ok":
        row["overhead_pct"] = 100 * (ev_s - row["bare_s"]) / row["bare_s"]
    return row


def _model(fixed, slope, c, works, params=None):
    """Rows whose evaluator time is exactly bare compile + fixed + slope * work."""
    return [_row(ms, w, c + fixed + slope * w, c, params) for ms, w in zip((150, 600, 1500, 3000), works)]


def test_budget_scales_the_cap_on_calls_with_the_time():
    base = BenchSettings()
    assert eo.budget(base.rep_ms) == base
    long = eo.budget(4 * base.rep_ms)
    assert long.rep_ms == 4 * base.rep_ms and long.max_reps == 4 * base.max_reps
    assert long.warmup_ms == base.warmup_ms and long.min_reps == base.min_reps
    assert eo.budget(base.rep_ms / 10).max_reps == base.max_reps  # never below the default's
    assert eo.budget(100).max_reps == base.max_reps and eo.budget(1001).max_reps == 1335  # rounded


def test_fit_recovers_fixed_cost_and_slope_and_the_break_even_work():
    fixed, slope, c = 0.5, 1.05, 0.4
    rows = _model(fixed, slope, c, (0.2, 0.8, 2.0))
    rows.append(_row(150, 0.2, 0.7, params={"MR": 8}))  # one budget only: no fit, and says why
    fits, reasons = eo.fit(rows)
    [f] = fits
    assert f["fixed_s"] == pytest.approx(fixed) and f["slope"] == pytest.approx(slope)
    assert f["r2"] == pytest.approx(1.0) and f["work_s"] == pytest.approx([0.2, 2.0])
    x = f["breakeven_work_s"]
    # At the break-even work the overhead is exactly the target.
    assert 100 * (fixed + slope * x - x) / (c + x) == pytest.approx(eo.TARGET_PCT)
    assert reasons == ["gemm MR=8: not fitted, fewer than 3 budgets measured ok"]
    table = eo.fit_markdown(fits, reasons)
    assert "| gemm | square-1024 | MR=4 | 0.50 | +5% | 1.000 | 0.40 | 0.20-2.00 | 4.4 |" in table
    assert table.endswith("- gemm MR=8: not fitted, fewer than 3 budgets measured ok")


def test_the_evaluators_slower_compile_is_part_of_its_fixed_cost():
    # Its compile takes 0.1 s longer than the bare one: the overhead counts it, so does the fit.
    rows = _model(0.3, 1.0, 0.4, (0.2, 0.8, 2.0))
    for r in rows:
        r["ev_compile_s"] = 0.5
    [f], _ = eo.fit(rows)
    assert f["fixed_s"] == pytest.approx(0.3)
    # A bare work of x = (fixed - t c) / (1 + t - slope) gives the target: 0.24 / 0.15 = 1.6 s.
    assert f["breakeven_work_s"] == pytest.approx(1.6)
    # With the bare compile varying between budgets, its median is the c of the break-even.
    rows = _model(0.3, 1.0, 0.4, (0.2, 0.8, 2.0))
    for r, c in zip(rows, (0.4, 0.6, 1.4)):
        r["evaluator_s"] += c - r["compile_s"]
        r["bare_s"] += c - r["compile_s"]
        r["compile_s"] = c
    [f], _ = eo.fit(rows)
    assert f["compile_s"] == pytest.approx(0.6) and f["breakeven_work_s"] == pytest.approx((0.3 - 0.09) / 0.15)


def test_break_even_at_the_edges():
    [cheap], _ = eo.fit(_model(0.01, 1.05, 0.4, (0.2, 0.8, 2.0)))
    assert cheap["breakeven_work_s"] == 0.0  # within the target whatever the work
    [steep], _ = eo.fit(_model(0.1, 1.5, 0.4, (0.2, 0.8, 2.0)))
    assert steep["slope"] == pytest.approx(1.5) and steep["breakeven_work_s"] is None
    assert "| never |" in eo.fit_markdown([steep])


def test_no_fit_through_noise():
    # Budgets below the cap on calls give nearly the same work: the slope would be noise.
    fits, [reason] = eo.fit(_model(0.3, 1.1, 0.4, (0.20, 0.21, 0.25)))
    assert fits == [] and "spans 0.200-0.250 s" in reason
    failed = _model(0.3, 1.1, 0.4, (0.2, 0.8, 2.0))
    failed[1] = _row(600, 0.8, 1.0, status="compile_error")
    fits, [reason] = eo.fit(failed)  # two budgets left ok
    assert fits == [] and "fewer than 3" in reason
    twice = _model(0.3, 1.1, 0.4, (0.2, 2.0))
    twice.append({**twice[0], "evaluator_s": twice[0]["evaluator_s"] + 0.01})  # a budget again
    fits, [reason] = eo.fit(twice)
    assert fits == [] and "fewer than 3" in reason


def test_a_candidate_failing_in_any_repeat_is_not_judged():
    rows = [_row(150, 0.2, 0.9), _row(150, 0.2, 0.9, status="timeout")]
    out = eo._median_rows(rows)
    assert out["status"] == "timeout (1 of 2 repeats)" and "overhead_pct" not in out
    ok = eo._median_rows([_row(150, 0.2, 0.9), _row(150, 0.2, 1.1), _row(150, 0.2, 1.0)])
    assert ok["evaluator_s"] == pytest.approx(1.0) and ok["repeats"] == 3


class _StubEvictor:
    """Records the plans made: which arrays each evicts and fills."""

    def __init__(self, fills=True):
        self.plans, self.fills = [], fills

    def plan(self, arrays, fill=()):
        made = {"arrays": [a.ctypes.data for a in arrays], "fill": [a.ctypes.data for a in fill], "calls": 0}
        self.plans.append(made)

        def run():
            made["calls"] += 1

        run.fills = self.fills and bool(fill)
        return run


def test_flush_cost_compares_the_bare_eviction_with_fill_and_eviction():
    x = np.ones(4096, np.float32)
    y = np.zeros(1024, np.float32)
    stub = _StubEvictor()
    f = eo.flush_cost(lambda: None, [x, y], [y], stub, n=4)
    bare, filling = sorted(stub.plans, key=lambda p: len(p["fill"]))
    assert bare["fill"] == [] and bare["arrays"] == [x.ctypes.data, y.ctypes.data]
    assert filling["fill"] == [y.ctypes.data] and filling["arrays"] == bare["arrays"]
    assert bare["calls"] == filling["calls"] == 4 and f["fills"] is True
    assert f["output_bytes"] == y.nbytes and f["bytes"] == x.nbytes + y.nbytes
    assert eo.flush_cost(lambda: None, [x, y], [y], _StubEvictor(fills=False), n=1)["fills"] is False


def test_flush_cost_with_the_real_helper_leaves_the_outputs_nan():
    from kernels.timing import Evictor, evict_library

    x = np.ones(4096, np.float32)
    y = np.zeros(4096, np.float32)
    calls = []
    f = eo.flush_cost(lambda: calls.append(y.__setitem__(slice(None), 1.0)), [x, y], [y], Evictor(evict_library()), n=5)
    assert len(calls) == 10 and np.isnan(y).all() and (x == 1).all()
    assert f["evict_us"] > 0 and f["fill_evict_us"] > 0 and f["fills"] is True


def test_flush_table_relates_the_fill_to_the_kernel_time():
    label = "rows=512,hidden=4096"
    row = {"workload": "rmsnorm", "params": {"VEC": 8}, "median_ms": {label: 0.4},
           "flush_us": {label: {"output_bytes": 8 * 2**20, "bytes": 16 * 2**20, "fills": True,
                                "evict_us": 200.0, "fill_evict_us": 500.0}}}
    other = {**row, "params": {"VEC": 16}}
    table = eo.flush_markdown([row, dict(row), other])  # one line per candidate and shape
    assert table.count(label) == 2
    assert f"| rmsnorm | VEC=8 | {label} | 0.400 | - | 8.00 / 16.00 | 200 | 500 | +50% |" in table
    nofill = {**row, "flush_us": {label: {**row["flush_us"][label], "fills": False}}}
    assert table.splitlines()[0].count("|") == eo.flush_markdown([nofill]).splitlines()[2].count("|")
    assert "- (no fill helper)" in eo.flush_markdown([nofill])
    assert f"| {label} | 0.400 | 0.390 | 8.00 / 16.00 |" in eo.flush_markdown([{**row, "bare_median_ms": {label: 0.39}}])


def test_main_table_cells_and_verdicts():
    row = {**_row(150, 0.2, 1.2), "latency_ms": 12.5, "ev_compile_s": 0.45, "ev_validation_s": 0.2,
           "ev_timing_s": 0.3, "ev_rest_s": 0.25, "load_s": 0.001, "bench_s": 0.199, "own_s": 0.55,
           "bare_calls_s": 0.58, "overhead_calls_pct": 107.0}
    short = {**row, "latency_ms": 0.5}
    lines = eo.markdown([row, short]).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert len(head) == len(cells) == 15
    got = dict(zip(head, cells))
    assert got["timed budget (ms)"] == "150" and got["overhead %"] == "100" and got["target <= 15%"] == "FAIL"
    assert got["evaluator's own time (s)"] == "0.55" and got["bare calls (s)"] == "0.58"
    assert got["compile / validation child / timing child / rest (s)"] == "0.45 / 0.20 / 0.30 / 0.25"
    assert "not judged (< 1 ms)" in lines[3]
    passing = {**row, "evaluator_s": 0.65, "overhead_pct": 8.3}
    assert "| pass |" in eo.markdown([passing])


@pytest.mark.parametrize("argv", [["--rep-ms", "0"], ["--rep-ms", "nan"], ["--rep-ms", "60001"],
                                  ["--rep-ms", "150", "x"], ["--repeats", "0"]])
def test_bad_arguments_are_usage_errors_before_anything_runs(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        eo.main(argv)
    assert exc.value.code == 2 and "error: argument" in capsys.readouterr().err
