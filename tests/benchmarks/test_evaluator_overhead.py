"""The evaluator-overhead benchmark's budgets, tables and fixed + per-second fit, on rows whose
answer is known (the measurements themselves need a compiler and time: not a unit test)."""

import pytest

from benchmarks import evaluator_overhead as eo
from kernels.evaluation.timing import BenchSettings


def _row(rep_ms, work_s, ev_s, compile_s=0.4, params=None, status="ok", medians=((12.0, 12.1),)):
    """A row: bare = compile + work, evaluator = ev_s in all (its own compile inside); measured
    (both sides' kernel medians per shape, ms) when ``ok``, the evaluator's verdict alone else."""
    row = {"workload": "gemm", "shape_set": "square-1024", "params": params or {"MR": 4}, "rep_ms": rep_ms,
           "status": status, "evaluator_s": ev_s}
    if status == "ok":
        labels = [f"M={2 ** (10 + i)}" for i in range(len(medians))]
        row.update(compile_s=compile_s, bare_s=compile_s + work_s, load_s=0.001, bench_s=work_s - 0.001,
                   median_ms={k: e for k, (e, _) in zip(labels, medians)},
                   bare_median_ms={k: b for k, (_, b) in zip(labels, medians)})
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


def test_fit_recovers_fixed_cost_and_slope():
    fixed, slope, c = 0.5, 1.05, 0.4
    rows = _model(fixed, slope, c, (0.2, 0.8, 2.0))
    rows.append(_row(150, 0.2, 0.7, params={"MR": 8}))  # one budget only: no fit, and says why
    fits, reasons = eo.fit(rows)
    [f] = fits
    assert f["fixed_s"] == pytest.approx(fixed) and f["slope"] == pytest.approx(slope)
    assert f["r2"] == pytest.approx(1.0) and f["work_s"] == pytest.approx([0.2, 2.0])
    assert f["compile_s"] == pytest.approx(c) and "breakeven_work_s" not in f
    assert reasons == ["gemm MR=8: not fitted, fewer than 3 budgets measured ok"]
    table = eo.fit_markdown(fits, reasons)
    assert "| gemm | square-1024 | MR=4 | 0.50 | +5% | 1.000 | 0.40 | 0.20-2.00 |" in table
    assert "15%" not in table
    assert table.endswith("- gemm MR=8: not fitted, fewer than 3 budgets measured ok")


def test_the_evaluators_slower_compile_is_part_of_its_fixed_cost():
    # Its compile takes 0.1 s longer than the bare one: the fit counts it in the fixed cost.
    rows = _model(0.3, 1.0, 0.4, (0.2, 0.8, 2.0))
    for r in rows:
        r["ev_compile_s"] = 0.5
    [f], _ = eo.fit(rows)
    assert f["fixed_s"] == pytest.approx(0.3)
    # With the bare compile varying between budgets, the fit's compile is its median.
    rows = _model(0.3, 1.0, 0.4, (0.2, 0.8, 2.0))
    for r, c in zip(rows, (0.4, 0.6, 1.4)):
        r["evaluator_s"] += c - r["compile_s"]
        r["bare_s"] += c - r["compile_s"]
        r["compile_s"] = c
    [f], _ = eo.fit(rows)
    assert f["compile_s"] == pytest.approx(0.6) and f["fixed_s"] == pytest.approx(0.3)


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
    assert out["status"] == "timeout (1 of 2 repeats)" and "bare_s" not in out
    assert eo.fixed_costs([out], []) == [{k: out[k] for k in ("workload", "shape_set", "params", "rep_ms", "status")}]
    ok = eo._median_rows([_row(150, 0.2, 0.9, medians=((1.0, 2.0), (5.0, 4.0))),
                          _row(150, 0.2, 1.1, medians=((3.0, 2.5), (6.0, 4.5))),
                          _row(150, 0.2, 1.0, medians=((2.0, 1.0), (9.0, 9.0)))])
    assert ok["evaluator_s"] == pytest.approx(1.0) and ok["repeats"] == 3
    # The kernel's medians: per timed shape, the median over the repeats.
    assert ok["median_ms"] == {"M=1024": 2.0, "M=2048": 6.0} and ok["bare_median_ms"] == {"M=1024": 2.0, "M=2048": 4.5}


@pytest.mark.parametrize("argv", [["--rep-ms", "0"], ["--rep-ms", "nan"], ["--rep-ms", "60001"],
                                  ["--rep-ms", "150", "x"], ["--repeats", "0"], ["--demo-budget", "0"],
                                  ["--demo-budget", "x"], ["--no-demo", "--demo-budget", "6"]])
def test_bad_arguments_are_usage_errors_before_anything_runs(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        eo.main(argv)
    assert exc.value.code == 2 and "error: argument" in capsys.readouterr().err


def test_fidelity_is_the_evaluators_median_over_the_bare_one_per_shape_and_in_total():
    row = _row(150, 0.2, 0.9, medians=((1.03, 1.0), (0.97, 1.0), (2.1, 2.0)))
    f = eo.fidelity(row)
    a, b, c = (f["shapes"][k] for k in ("M=1024", "M=2048", "M=4096"))
    # Exactly 3% off either way passes (the ratio's float error is no failure); 5% does not.
    assert a["ratio"] == pytest.approx(1.03) and a["pass"] and b["ratio"] == pytest.approx(0.97) and b["pass"]
    assert c["ratio"] == pytest.approx(1.05) and not c["pass"]
    assert c["evaluator_ms"] == 2.1 and c["bare_ms"] == 2.0
    # The total: sum of the per-shape medians on each side (the evaluator's latency_ms).
    assert f["total"]["evaluator_ms"] == pytest.approx(4.1) and f["total"]["bare_ms"] == pytest.approx(4.0)
    assert f["total"]["ratio"] == pytest.approx(4.1 / 4.0) and f["total"]["pass"]
    assert not eo.within_fidelity(1.0301) and not eo.within_fidelity(0.9699) and eo.within_fidelity(1.0)


def test_fidelity_refuses_rows_whose_sides_do_not_match():
    row = _row(150, 0.2, 0.9, medians=((1.0, 1.0), (2.0, 2.0)))
    with pytest.raises(ValueError, match="timed"):
        eo.fidelity({**row, "bare_median_ms": {"M=1024": 1.0}})
    with pytest.raises(ValueError, match="not positive"):
        eo.fidelity({**row, "bare_median_ms": {"M=1024": 1.0, "M=2048": 0.0}})


def test_fixed_cost_from_the_fit_or_from_one_budget():
    fitted = _model(0.3, 1.1, 0.4, (0.2, 0.8, 2.0))  # fixed 0.3 s against a 0.4 s compile
    single = _row(150, 0.2, 1.6, compile_s=0.5, params={"MR": 8})  # 1.6 - (0.5 + 0.2) = 0.9 s
    fits, _ = eo.fit(fitted + [single])
    heads = eo.headline_rows(fitted + [single], 150)
    assert [h["rep_ms"] for h in heads] == [150, 150]
    a, b = eo.fixed_costs(heads, fits)
    assert a["method"] == "fit" and a["budgets"] == 3 and a["fixed_s"] == pytest.approx(0.3)
    assert a["compile_s"] == pytest.approx(0.4) and a["ratio"] == pytest.approx(0.75) and a["pass"]
    assert b["method"] == "single budget" and b["fixed_s"] == pytest.approx(0.9)
    assert b["compile_s"] == 0.5 and b["ratio"] == pytest.approx(1.8) and not b["pass"]
    # Exactly the compile passes.
    [even] = eo.fixed_costs([_row(150, 0.2, 1.0, compile_s=0.4)], [])
    assert even["ratio"] == pytest.approx(1.0) and even["pass"]


def test_headline_rows_take_the_default_budget_else_the_first():
    rows = _model(0.3, 1.1, 0.4, (0.2, 0.8, 2.0))  # 150, 600, 1500 ms
    assert [r["rep_ms"] for r in eo.headline_rows(rows[::-1], 150)] == [150]
    assert [r["rep_ms"] for r in eo.headline_rows(rows[1:], 150)] == [600]


def test_demo_rate_per_minute_of_wall_and_of_the_runs_time():
    summary = {"evaluated": 24, "status_counts": {"ok": 20, "wrong_result": 4}, "wall_s": 90.0}
    d = eo.demo_rate(summary, 120.0, 24)
    assert d["per_min_wall"] == pytest.approx(12.0) and d["per_min_run"] == pytest.approx(16.0)
    assert d["evaluated"] == 24 and d["budget"] == 24 and d["run_s"] == 90.0
    assert d["status_counts"] == {"ok": 20, "wrong_result": 4}
    bare = eo.demo_rate({"evaluated": 6}, 30.0, 8)
    assert bare["per_min_wall"] == pytest.approx(12.0) and bare["run_s"] is None and bare["per_min_run"] is None
    with pytest.raises(ValueError, match="not positive"):
        eo.demo_rate(summary, 0.0, 24)


def test_the_demo_run_is_the_demo_goal_headless():
    cmd = eo.demo_command(24, 5)
    assert cmd[1:4] == ["manage.py", "factory", "run"]
    got = dict(zip(cmd[4::2], cmd[5::2]))
    assert got["--workload"] == "rmsnorm" and got["--target"] == "cpu-x86_64" and got["--shape-set"] == "llama3-8b"
    assert got["--budget"] == "24" and got["--seed"] == "5" and cmd[-2:] == ["--no-baseline", "--json"]


def test_demo_env_has_its_own_database_and_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("REDIS_URL", "redis://x")
    monkeypatch.setenv("DATABASE_URL", "postgres://x")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setattr(eo, "_OMP_GIVEN", False)
    env = eo._demo_env(tmp_path / "db.sqlite3", tmp_path / "cache")
    assert env["DATABASE_URL"] == f"sqlite:///{tmp_path / 'db.sqlite3'}" and "REDIS_URL" not in env
    assert env["KERNELS_CACHE_DIR"] == str(tmp_path / "cache") and "OMP_WAIT_POLICY" not in env
    monkeypatch.setattr(eo, "_OMP_GIVEN", True)
    assert eo._demo_env(tmp_path / "db", tmp_path / "c")["OMP_WAIT_POLICY"] == "PASSIVE"


def test_a_failing_demo_run_says_which_command_and_why(monkeypatch, tmp_path):
    monkeypatch.setattr(eo, "ROOT", tmp_path)  # no manage.py there
    with pytest.raises(RuntimeError, match=r"manage.py migrate --noinput -v 0 exited 2:\n.*manage.py"):
        eo.run_demo(1, 0, 60)


def _report_rows():
    fitted = _model(0.3, 1.1, 0.4, (0.2, 0.8, 2.0), params={"MR": 4})
    for r in fitted:
        r["median_ms"], r["bare_median_ms"] = {"M=1024": 1.0, "M=2048": 3.0}, {"M=1024": 1.0, "M=2048": 2.9}
    single = _row(150, 0.2, 1.6, compile_s=0.5, params={"MR": 8}, medians=((1.2, 1.0),))
    failed = {**_row(150, 0.2, 0.9, params={"MR": 2}, status="timeout")}
    results = fitted + [single, failed]
    fits, _ = eo.fit(results)
    heads = eo.headline_rows(results, 150)
    return results, heads, eo.fixed_costs(heads, fits)


def _cells(table: str, line: int) -> dict:
    lines = table.splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = [c.strip() for c in lines[line].strip("|").split("|")]
    assert len(head) == len(cells)
    return dict(zip(head, cells))


def test_report_leads_with_the_three_figures():
    results, heads, costs = _report_rows()
    demo = eo.demo_rate({"evaluated": 24, "status_counts": {"ok": 22, "compile_error": 2}, "wall_s": 90.0}, 120.0, 24)
    demo["goal"] = eo.DEMO_GOAL
    md = eo.headline_markdown(heads, costs, demo)
    sections = md.split("## ")[1:]
    assert [s.splitlines()[0] for s in sections] == ["(a) fidelity and (b) fixed cost per candidate",
                                                     "(a) fidelity per timed shape",
                                                     "(c) candidates per minute on the demo goal"]
    main = sections[0].split("\n", 2)[2]
    fitted, single, failed = (_cells(main, i) for i in (2, 3, 4))
    assert fitted["(a) evaluator / bare median, total"] == f"{4.0 / 3.9:.3f}" and fitted["(a)"] == "PASS"
    assert fitted["(b) fixed cost (s)"] == "0.30" and fitted["how"] == "fit over 3 budgets"
    assert fitted["bare compile (s)"] == "0.40" and fitted["(b) fixed / compile"] == "0.75x" and fitted["(b)"] == "PASS"
    assert single["(a) evaluator / bare median, total"] == "1.200" and single["(a)"] == "FAIL"
    assert single["how"] == "evaluator - bare (upper bound)" and single["(b) fixed / compile"] == "1.80x"
    assert single["(b)"] == "FAIL" and single["budget (ms)"] == "150"
    assert failed["status"] == "timeout"
    assert failed["(a)"] == failed["(b)"] == failed["(b) fixed cost (s)"] == "-"
    shapes = sections[1].split("\n", 2)[2]
    assert _cells(shapes, 3) == {"workload": "gemm", "params": "MR=4", "shape": "M=2048", "evaluator median (ms)": "3.0000",
                                 "bare median (ms)": "2.9000", "ratio": "1.034", "within 3%": "FAIL"}
    demo_row = _cells(sections[2].split("\n", 2)[2], 2)
    assert demo_row["goal"] == "rmsnorm / cpu-x86_64 / llama3-8b" and demo_row["statuses"] == "compile_error: 2, ok: 22"
    assert demo_row["per minute of wall time"] == "12.0" and demo_row["per minute of the run's time"] == "16.0"
    assert "not measured (--no-demo)" in eo.headline_markdown(heads, costs, None)
    line = eo.summary_line(heads, costs, demo)
    assert line == ("(a) fidelity within 3%: 1 of 3 candidates in total, 1 of 3 timed shapes; (b) fixed cost <= 1x "
                    "the compile: 1 of 3 candidates; (c) demo goal: 12.0 candidates per minute (24 in 120 s)")
    assert eo.summary_line(heads, costs, None).endswith("(c) demo goal: not measured")
    assert "15%" not in md + eo.markdown(results) + line


def test_supporting_table_says_where_the_evaluators_time_goes():
    row = {**_row(150, 0.2, 1.2), "latency_ms": 12.5, "ev_compile_s": 0.45, "ev_validation_s": 0.2,
           "ev_timing_s": 0.3, "ev_rest_s": 0.25}
    table = eo.markdown([row, _row(150, 0.2, 0.9, status="timeout")])
    got = _cells(table, 2)
    assert got["timed budget (ms)"] == "150" and got["kernel latency (ms)"] == "12.500" and got["evaluator (s)"] == "1.20"
    assert got["compile / validation child / timing child / rest (s)"] == "0.45 / 0.20 / 0.30 / 0.25"
    assert got["bare benchmark (s)"] == "0.60" and got["compile / load / warm-up + flushed calls (s)"] == "0.40 / 0.001 / 0.199"
    assert _cells(table, 3)["bare benchmark (s)"] == "-"
