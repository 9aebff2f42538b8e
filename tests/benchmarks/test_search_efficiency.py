"""The statistics of the search-efficiency benchmark, on traces whose answers are known."""

import json
import math
from pathlib import Path

import pytest

from benchmarks.methodology_score import best_so_far, run_scores
from benchmarks.search_efficiency import (
    KT_BUDGET_FREE,
    KT_NOT_REPEATABLE,
    KT_STRATEGIES,
    Dataset,
    _Recorded,
    best_ratio,
    evals_to,
    hypervolume,
    load_dataset,
    random_curves,
    run_kt,
    run_optuna_tpe,
    run_ours,
    scores_of,
    siblings,
    summarise,
    verdict,
)

ENERGY_FILE = Path(__file__).resolve().parents[2].parent / "shared/datasets/tuning-cache/gemm-xgemm-energy_A100-PCIE-40GB_partial.json.gz"
PNPOLY_FILE = ENERGY_FILE.with_name("pnpoly_RTX-2080-Ti.json.gz")


def test_hypervolume_of_a_staircase():
    # points (1,3), (2,2), (3,1) with reference (4,4): 3*1 + 2*1 + 1*1 ... as unit strips = 6
    assert hypervolume([(1, 3), (2, 2), (3, 1)], (4, 4)) == pytest.approx(6.0)
    assert hypervolume([(1, 3), (2, 2), (3, 1), (2.5, 2.5)], (4, 4)) == pytest.approx(6.0)  # dominated: no gain
    assert hypervolume([], (4, 4)) == 0.0


def test_best_ratio_and_evaluations_to_a_threshold_count_failures_as_evaluations():
    trace = [(False, None, None), (True, 2.0, None), (True, 1.04, None), (True, 1.0, None)]
    assert best_ratio(trace, 2, 1.0) == 2.0
    assert best_ratio(trace, 4, 1.0) == 1.0
    assert evals_to(trace, 4, 1.0, 0.05) == 3
    assert evals_to(trace, 4, 1.0, 0.01) == 4
    assert math.isinf(evals_to(trace, 2, 1.0, 0.05))


def test_summary_and_targets():
    ds = Dataset("d", None, None, (), 1.0, False, None, None)
    traces = {
        ("d", "swarm"): {(None, 0): [(True, 1.0, None)] * 1, (None, 1): [(True, 1.2, None), (True, 1.0, None)]},
        ("d", "kt:random_sample"): {(1, 0): [(True, 1.5, None)], (1, 1): [(True, 1.5, None)],
                                    (2, 0): [(True, 1.5, None), (True, 1.1, None)], (2, 1): [(True, 1.5, None), (True, 1.1, None)]},
    }
    rows = summarise(traces, {"d": ds}, [1, 2])
    cell = {(r["strategy"], r["budget"]): r for r in rows}
    assert cell[("swarm", 1)]["median_ratio"] == pytest.approx(1.1)
    assert cell[("swarm", 2)]["median_ratio"] == 1.0 and cell[("swarm", 2)]["evals_to_1pct"] == 1.5
    assert cell[("kt:random_sample", 2)]["evals_to_5pct"] is None
    assert cell[("swarm", 1)]["runs_within_1pct"] == 1 and cell[("swarm", 2)]["runs_within_1pct"] == 2
    assert cell[("kt:random_sample", 2)]["runs_within_1pct"] == 0
    lines = verdict(rows)
    assert any("d @ 1: swarm" in line and "met" in line for line in lines)


@pytest.mark.skipif(not ENERGY_FILE.exists(), reason="needs ../shared/datasets/tuning-cache")
@pytest.mark.parametrize("strategy", sorted(KT_BUDGET_FREE & set(KT_STRATEGIES) - KT_NOT_REPEATABLE))
def test_kernel_tuner_runs_at_a_small_budget_are_prefixes_of_the_run_at_the_largest(strategy, tmp_path):
    # What lets the benchmark run these strategies once, at the largest budget.
    ds = load_dataset(ENERGY_FILE, tmp_path)
    for seed in (0, 1):
        full = run_kt(ds, strategy, seed, 120)
        assert len(full) >= 5  # minimize, dual_annealing and firefly_algorithm may stop early by themselves
        assert run_kt(ds, strategy, seed, 40) == full[:40]


@pytest.mark.skipif(not ENERGY_FILE.exists(), reason="needs ../shared/datasets/tuning-cache")
def test_simulated_annealing_depends_on_the_budget_so_it_runs_once_per_budget(tmp_path):
    ds = load_dataset(ENERGY_FILE, tmp_path)
    assert "simulated_annealing" not in KT_BUDGET_FREE
    assert run_kt(ds, "simulated_annealing", 0, 40) != run_kt(ds, "simulated_annealing", 0, 120)[:40]


@pytest.mark.skipif(not ENERGY_FILE.exists(), reason="needs ../shared/datasets/tuning-cache")
def test_the_tpe_peer_gets_its_whole_budget_of_distinct_recorded_configurations(tmp_path):
    # The file records 898 of 207,360 configurations: without repair TPE ended after 1-5
    # evaluations (most asks unrecorded, the ask cap reached).
    from kernels.interchange.tuning_cache import load_cache

    ds = load_dataset(ENERGY_FILE, tmp_path)
    trace = run_optuna_tpe(ds, 0, 60)
    assert len(trace) == 60
    recorded_times = {round(float(e["time"]), 9) for e in load_cache(ENERGY_FILE).entries.values()
                      if isinstance(e.get("time"), (int, float))}
    assert all(round(t, 9) in recorded_times for ok, t, _ in trace if ok)
    assert run_optuna_tpe(ds, 0, 60) == trace  # seeded: repeatable


def test_repair_picks_the_nearest_recorded_configuration_not_yet_taken():
    class Cache:  # three recorded points of a 3 x 3 space
        tune_params = {"a": [1, 2, 4], "b": [8, 16, 32]}
        tune_params_keys = ["a", "b"]
        entries = {"1,8": {"a": 1, "b": 8}, "4,32": {"a": 4, "b": 32}, "2,32": {"a": 2, "b": 32}}
        outside = frozenset()

        def params_of(self, key):
            return {k: self.entries[key][k] for k in self.tune_params_keys}

    rec = _Recorded(Cache())
    assert rec.keys[rec.nearest_free({"a": 4, "b": 16})] == "4,32"  # one rank away
    rec.take("4,32")
    assert rec.keys[rec.nearest_free({"a": 4, "b": 16})] == "2,32"  # two ranks, the nearest left
    rec.take("2,32")
    rec.take("1,8")
    assert rec.nearest_free({"a": 4, "b": 16}) is None


def test_every_kernel_tuner_strategy_is_run_or_left_out_with_a_reason():
    from kernel_tuner.interface import strategy_map

    from benchmarks.search_efficiency import KT_LEFT_OUT

    assert set(strategy_map) == set(KT_STRATEGIES) | set(KT_LEFT_OUT)
    assert not set(KT_STRATEGIES) & set(KT_LEFT_OUT)
    assert {"hybrid_vndx", "adaptive_tabu_greywolf"} <= set(KT_STRATEGIES)


@pytest.mark.skipif(not ENERGY_FILE.exists(), reason="needs ../shared/datasets/tuning-cache")
def test_dual_annealing_depends_on_the_budget_so_it_runs_once_per_budget(tmp_path):
    ds = load_dataset(ENERGY_FILE, tmp_path)
    assert "dual_annealing" not in KT_BUDGET_FREE
    assert len(run_kt(ds, "dual_annealing", 0, 100)) != len(run_kt(ds, "dual_annealing", 0, 400))


def test_scores_rank_a_strategy_that_finds_the_optimum_first_above_random_search(tmp_path):
    from benchmarks.search_efficiency import run_scores_by, score_table, versus_table

    cache = tmp_path / "toy.json"
    entries = {f"{a}": {"a": a, "time": float(a)} for a in range(1, 21)}
    cache.write_text(json.dumps({"device_name": "toy", "kernel_name": "toy", "problem_size": [1],
                                 "tune_params_keys": ["a"], "tune_params": {"a": list(range(1, 21))},
                                 "objective": "time", "cache": entries}))
    ds = Dataset("toy", cache, cache, ("a",), 1.0, False, None, None)
    traces = {("toy", "swarm"): {(None, 0): [(True, 1.0, None)] + [(True, 5.0, None)] * 3},
              ("toy", "kt:random_sample"): {(None, 0): [(True, 20.0, None), (True, 19.0, None), (True, 3.0, None)]}}
    score = scores_of(run_scores_by(traces, {"toy": ds}, 4))
    assert score["swarm"]["toy"] == pytest.approx(1.0)
    assert score["kt:random_sample"]["aggregate"] < score["swarm"]["aggregate"]
    assert score_table(score, {}).splitlines()[2].startswith("| swarm | 1.000 |")
    rows = summarise(traces, {"toy": ds}, [2, 4])
    table = versus_table(rows, score)
    assert "1.000 / 19.000 (random_sample)" in table and "✗" not in table


def _toy_cache(path: Path, kernel: str, best: int, device: str = "toy") -> Path:
    """A one-parameter recorded landscape, ``time = |a - best| + 1`` for a in 1..20."""
    entries = {f"{a}": {"a": a, "time": float(abs(a - best) + 1)} for a in range(1, 21)}
    path.write_text(json.dumps({"device_name": device, "kernel_name": kernel, "problem_size": [1],
                                "tune_params_keys": ["a"], "tune_params": {"a": list(range(1, 21))},
                                "objective": "time", "cache": entries}))
    return path


def test_siblings_are_the_files_of_the_same_kernel_and_parameters(tmp_path):
    mine = load_dataset(_toy_cache(tmp_path / "mine.json", "k", 5), tmp_path)
    other = load_dataset(_toy_cache(tmp_path / "other.json", "k", 6, "other device"), tmp_path)
    stranger = load_dataset(_toy_cache(tmp_path / "stranger.json", "another kernel", 6), tmp_path)
    assert mine.kernel == "k"
    assert siblings(mine, [mine, other, stranger]) == (other,)
    assert siblings(stranger, [mine, other, stranger]) == ()


@pytest.mark.django_db
def test_a_transfer_run_starts_from_what_the_run_on_another_device_found(tmp_path, monkeypatch):
    import benchmarks.search_efficiency as bench

    monkeypatch.setattr(bench, "_django_ready", True)  # the test database, not the benchmark's own
    mine = load_dataset(_toy_cache(tmp_path / "mine.json", "k", 5), tmp_path)
    other = load_dataset(_toy_cache(tmp_path / "other.json", "k", 12, "other device"), tmp_path)
    cold = run_ours(mine, ("local",), 0, 8, 4)
    warm = run_ours(mine, ("local",), 0, 8, 4, earlier=(other,))
    # the other device's optimum (a=12, time 8 here) and its runners-up come first, then the climb
    assert [t for _, t, _ in warm[:1]] == [8.0]
    assert sorted(t for _, t, _ in warm[:3]) == [7.0, 8.0, 9.0]
    assert [t for _, t, _ in cold[:1]] != [8.0]


@pytest.mark.skipif(not PNPOLY_FILE.exists(), reason="needs ../shared/datasets/tuning-cache")
@pytest.mark.django_db
def test_our_runs_end_in_an_endgame_so_they_run_once_per_budget(tmp_path, monkeypatch):
    """A run's last quarter goes to the local agent's climb (``SWARM_ENDGAME_SHARE``): the
    generations that start with at most 10 of 40 evaluations left, so a 40-evaluation run
    leaves a 120-evaluation one after its first 32."""
    import benchmarks.search_efficiency as bench
    from swarm.agents import DEFAULT_MIX

    monkeypatch.setattr(bench, "_django_ready", True)  # the test database, not the benchmark's own
    ds = load_dataset(PNPOLY_FILE, tmp_path)
    short, long = run_ours(ds, list(DEFAULT_MIX), 0, 40, 4), run_ours(ds, list(DEFAULT_MIX), 0, 120, 4)
    assert len(short) == 40 and short[:32] == long[:32] and short[32:] != long[32:40]
    assert bench.per_budget("ours", "swarm") and bench.per_budget("ours", "swarm:transfer")
    jobs = bench._plan({ds.name: ds}, ["swarm", "kt:genetic_algorithm", "kt:simulated_annealing", "optuna:tpe"],
                       [50, 100], range(1), 4)
    assert sorted((j[2], j[4], j[5]) for j in jobs) == [
        ("kt:genetic_algorithm", 100, 0), ("kt:simulated_annealing", 50, 0), ("kt:simulated_annealing", 100, 0),
        ("optuna:tpe", 100, 0), ("swarm", 50, 4), ("swarm", 100, 4)]


def test_verdict_and_versus_table_for_the_transfer_run():
    from benchmarks.search_efficiency import aggregate_line, versus_table

    rows = [{"dataset": "d", "strategy": s, "budget": b, "median_ratio": r, "runs_within_1pct": 1, "seeds": 1}
            for s, b, r in (("swarm", 100, 1.2), ("swarm:transfer", 100, 1.0), ("kt:pso", 100, 1.1),
                            ("kt:pso", 200, 1.05))]
    lines = verdict(rows, "swarm:transfer")
    assert "d @ 100: swarm:transfer 1.0000 vs best peer kt:pso 1.1000 -> met" in lines
    assert any(line.startswith("d: swarm:transfer@100") and "met (2x" in line for line in lines)
    assert "short by" in verdict(rows)[0]
    score = {"swarm:transfer": {"aggregate": 0.9, "d": 0.9}, "kt:pso": {"aggregate": 0.5, "d": 0.5}}
    assert aggregate_line(score, "swarm:transfer").endswith("-> met")
    errors = {"swarm:transfer": {"aggregate": 0.03}, "kt:pso": {"aggregate": 0.04}}
    assert aggregate_line(score, "swarm:transfer", errors).endswith("-> met (difference +0.400, standard error 0.050)")
    assert aggregate_line(score, "swarm:transfer", {"kt:pso": {"aggregate": None}}).endswith("-> met")
    assert aggregate_line(score) == "aggregate score: swarm has no score on d (no run finished there) -> not met"
    assert aggregate_line({"swarm": {"aggregate": 0.9, "d": 0.9}}) is None  # no peer scored
    assert "swarm:transfer / best peer @100" in versus_table(rows, score, "swarm:transfer")


def test_a_check_where_our_runs_failed_is_not_met_whatever_the_rest_achieved():
    from benchmarks.search_efficiency import aggregate_line

    rows = [{"dataset": d, "strategy": s, "budget": b, "median_ratio": r, "runs_within_1pct": 1, "seeds": n}
            for d, s, b, r, n in (("d", "swarm", 100, 1.0, 4), ("d", "kt:pso", 100, 1.1, 5), ("d", "kt:pso", 200, 1.05, 5),
                                  ("e", "kt:pso", 100, 1.1, 5), ("e", "kt:pso", 200, 1.0, 5))]
    lines = verdict(rows, "swarm", seeds=5)
    assert lines == [
        "d @ 100: swarm 1.0000 vs best peer kt:pso 1.1000 -> not met: 1 of 5 runs of swarm failed",
        "d @ 200: best peer kt:pso 1.0500 -> not met: no run of swarm finished",
        "d: swarm@100 1.0000 (1/4 runs within 1%) vs best peer@200 kt:pso 1.0500 (1/5) -> not met: 1 of 5 runs of swarm failed",
        "e @ 100: best peer kt:pso 1.1000 -> not met: no run of swarm finished",
        "e @ 200: best peer kt:pso 1.0000 -> not met: no run of swarm finished",
        "e: best peer@200 kt:pso 1.0000 (1/5) -> not met: no run of swarm finished",
    ]
    assert verdict(rows, "swarm")[0].endswith("-> met")  # without the planned count, the runs that finished
    score = {"swarm": {"aggregate": 0.9, "d": 0.9}, "kt:pso": {"aggregate": 0.5, "d": 0.5, "e": 0.5}}
    assert aggregate_line(score).endswith("has no score on e (no run finished there) -> not met")
    score["swarm"]["e"] = 0.9
    assert aggregate_line(score, failed=2) == ("aggregate score: swarm 0.900 vs best peer kt:pso 0.500 -> not met: "
                                               "2 runs of swarm failed and are not in its score")
    assert aggregate_line(score).endswith("-> met")


def test_the_report_counts_a_failed_run_of_ours_against_its_targets(tmp_path, monkeypatch):
    from benchmarks import search_efficiency

    def ours(ds, agents, seed, budget, *args, **kwargs):  # the optimum at once, except on seed 1
        if seed == 1:
            raise RuntimeError("the swarm broke")
        return [(True, ds.optimum, None)] * budget

    monkeypatch.setattr(search_efficiency, "run_ours", ours)  # the forked workers inherit it
    monkeypatch.setattr(search_efficiency, "_setup_django", lambda: None)  # no database: nothing is stored
    monkeypatch.setattr(search_efficiency, "DEFAULT_MIX", ())
    _toy_cache(tmp_path / "toy.json", "k", 5)
    out = tmp_path / "out"
    assert search_efficiency.main(["--cache", str(tmp_path / "toy.json"), "--strategies", "swarm,kt:random_sample",
                                   "--seeds", "2", "--budgets", "2,4", "--jobs", "1", "--out", str(out)]) == 0
    report = _strict((out / "search_efficiency.json").read_text())
    assert len(report["failed_runs"]) == 2 and all("the swarm broke" in f for f in report["failed_runs"])
    assert [t.rsplit("-> ", 1)[1] for t in report["targets"]] == [
        "not met: 1 of 2 runs of swarm failed", "not met: 1 of 2 runs of swarm failed",
        "not met: 2 runs of swarm failed and are not in its score"]
    assert (out / "search_efficiency.md").read_text().count("✗") == 3  # the header's and both budgets'
    assert "the same as `swarm` where a file has none: toy)" in (out / "search_efficiency.md").read_text()
    # the peers run again, ours taken from that report: its failures still count
    again = tmp_path / "again"
    assert search_efficiency.main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:random_sample",
                                   "--seeds", "2", "--budgets", "2,4", "--jobs", "1", "--out", str(again),
                                   "--reuse", str(out / "search_efficiency.json")]) == 0
    reused = _strict((again / "search_efficiency.json").read_text())
    assert reused["targets"] == report["targets"] and reused["failed_runs"] == report["failed_runs"]


def test_reuse_takes_the_strategies_not_run_from_an_earlier_report(tmp_path):
    from benchmarks.search_efficiency import main

    _toy_cache(tmp_path / "toy.json", "k", 5)
    earlier = {"host": "an earlier host", "results": [
        {"dataset": "toy", "strategy": "swarm", "budget": b, "median_ratio": 1.0, "iqr": 0.0, "evals_to_5pct": 1,
         "evals_to_1pct": 1, "runs_within_1pct": 1, "seeds": 1} for b in (2, 4)],
        "scores": {"swarm": {"aggregate": 1.0, "toy": 1.0}}, "cpu_by_strategy": {}}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    out = tmp_path / "out"
    out.mkdir()
    assert main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:pso", "--seeds", "1", "--budgets", "2,4",
                 "--jobs", "1", "--reuse", str(tmp_path / "earlier.json"), "--out", str(out)]) == 0
    report = json.loads((out / "search_efficiency.json").read_text())
    assert {r["strategy"] for r in report["results"]} == {"swarm", "kt:pso"}
    assert "kt:pso" in report["scores"] and any("swarm" in t and "kt:pso" in t for t in report["targets"])
    assert f"Taken from `{tmp_path / 'earlier.json'}` (an earlier host): swarm." in (out / "search_efficiency.md").read_text()
    malformed = {**earlier, "results": [{"strategy": "swarm"}]}
    other_budgets = ["--budgets", "2,8"]
    for report, extra in (([], []), (malformed, []), (earlier, other_budgets), (earlier, ["--seeds", "2"]),
                          (earlier, ["--first-seed", "1"]), ({**earlier, "first_seed": 5}, []),
                          *(({**earlier, "first_seed": bad}, []) for bad in ("0", None, True, [0], -1)),
                          ({**earlier, "results": [{**r, "seeds": "1"} for r in earlier["results"]]}, []),
                          *(({**earlier, "score_standard_errors": bad}, [])
                            for bad in ("x", {"swarm": 0.1}, {"swarm": {"toy": -1}}, {"swarm": {"toy": "0.1"}},
                                        {"swarm": {"toy": True}}, {"swarm": {"toy": float("nan")}},
                                        {"swarm": {"toy": 10**400}})),
                          *(({**earlier, "scores": {"swarm": {"aggregate": bad, "toy": 1.0}}}, [])
                            for bad in (None, "1.0", float("inf"), 10**400))):
        (tmp_path / "bad.json").write_text(json.dumps(report))
        with pytest.raises(SystemExit):  # refused before any run, not after all of them
            main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:pso", "--reuse", str(tmp_path / "bad.json"),
                  "--out", str(out), *extra])


def test_first_seed_runs_the_seeds_from_there_and_the_report_says_which(tmp_path):
    from benchmarks.search_efficiency import main

    _toy_cache(tmp_path / "toy.json", "k", 5)
    out = tmp_path / "out"
    out.mkdir()
    assert main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:random_sample", "--seeds", "2",
                 "--first-seed", "7", "--budgets", "2,4", "--jobs", "1", "--traces", str(tmp_path / "t.jsonl"),
                 "--out", str(out)]) == 0
    runs = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert sorted(r[3] for r in runs) == [7, 8]  # the seed of each run
    report = json.loads((out / "search_efficiency.json").read_text())
    assert report["first_seed"] == 7
    assert "2 seeds (7-8)" in (out / "search_efficiency.md").read_text()
    # the score is the mean of the two runs' own scores; its standard error their spread over root 2
    ds = load_dataset(tmp_path / "toy.json", tmp_path)
    curve, worst = random_curves({"toy": ds}, 4)["toy"]
    own = run_scores([best_so_far([t if ok else None for ok, t, _ in r[5]], 4, worst)
                      for r in runs], curve, ds.optimum)
    assert report["scores"]["kt:random_sample"]["toy"] == pytest.approx(own.mean())
    assert report["score_standard_errors"]["kt:random_sample"]["aggregate"] == pytest.approx(own.std(ddof=1) / math.sqrt(2))
    assert scores_of({"s": {"toy": own}})["s"]["aggregate"] == pytest.approx(own.mean())
    assert "| aggregate score | standard error |" in (out / "search_efficiency.md").read_text()
    (tmp_path / "cut.jsonl").write_text((tmp_path / "t.jsonl").read_text()[:-30])  # its last write cut short
    for bad in (["--first-seed", "-1"], ["--seeds", "0"], ["--first-seed", str(2**32)], ["--budgets", "2,x"],
                ["--budgets", "0,4"], ["--jobs", "0"], ["--traces", str(tmp_path / "cut.jsonl")]):
        with pytest.raises(SystemExit):
            main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:random_sample", "--out", str(out), *bad])


@pytest.mark.parametrize("raw", ["abc", "nan", "1.5"])
def test_a_bad_endgame_share_is_a_usage_error_before_any_run(raw, tmp_path, monkeypatch, capsys):
    from benchmarks.search_efficiency import main

    monkeypatch.setenv("SWARM_ENDGAME_SHARE", raw)
    _toy_cache(tmp_path / "toy.json", "k", 5)
    with pytest.raises(SystemExit) as stop:
        main(["--cache", str(tmp_path / "toy.json"), "--strategies", "swarm,kt:random_sample", "--seeds", "1",
              "--budgets", "4", "--out", str(tmp_path / "out")])
    assert stop.value.code == 2 and "expected a share of the budget in [0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "out" / "search_efficiency.json").exists()


def test_a_stored_run_is_reused_only_for_the_same_files_contents_generation_size_and_endgame(tmp_path, monkeypatch):
    from benchmarks.search_efficiency import _identity, _job_key, _read_traces

    mine = load_dataset(_toy_cache(tmp_path / "mine.json", "k", 5), tmp_path)
    other = load_dataset(_toy_cache(tmp_path / "other.json", "k", 12, "other device"), tmp_path)
    (tmp_path / "changed").mkdir()
    changed = load_dataset(_toy_cache(tmp_path / "changed" / "mine.json", "k", 6), tmp_path / "changed")
    assert changed.name == mine.name and changed.sha256 != mine.sha256
    job = ("ours", mine, "swarm:transfer", 0, 4, 4, ())
    record = ["ours", mine.name, "swarm:transfer", 0, 4, [[True, 1.0, None]], 1.0, 1.0]
    (tmp_path / "t.jsonl").write_text(json.dumps([*record, [], _identity(job)]) + "\n")  # learned from nothing
    stored = _read_traces(tmp_path / "t.jsonl")
    assert _job_key(job) in stored
    assert _job_key(("ours", mine, "swarm:transfer", 0, 4, 4, (other,))) not in stored
    assert _job_key(("ours", changed, "swarm:transfer", 0, 4, 4, ())) not in stored  # same name, other contents
    assert _job_key(("ours", mine, "swarm:transfer", 0, 4, 16, ())) not in stored  # another --batch-size
    monkeypatch.setenv("SWARM_ENDGAME_SHARE", "0.1")
    assert _job_key(job) not in stored  # another endgame
    monkeypatch.setenv("SWARM_ENDGAME_SHARE", "")
    assert _job_key(job) in stored  # empty is unset: the default
    monkeypatch.delenv("SWARM_ENDGAME_SHARE")
    for old in (record, [*record, []]):  # written before the files learned from, or the contents, were recorded
        (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
        assert list(_read_traces(tmp_path / "old.jsonl")) == [(mine.name, "swarm:transfer", 0, 4, (), None)]
        assert _job_key(job) not in _read_traces(tmp_path / "old.jsonl")  # run again
    (tmp_path / "cut.jsonl").write_text(json.dumps(record) + "\n" + json.dumps(record)[:20])  # a write cut short
    with pytest.raises(ValueError, match="line 2 is not a finished run"):
        _read_traces(tmp_path / "cut.jsonl")


def test_a_run_past_the_run_limit_is_stopped_and_listed_as_failed(tmp_path, monkeypatch):
    import time

    from benchmarks import search_efficiency

    def hang(*args, **kwargs):  # a peer stuck in a loop that swallows its own errors
        while True:
            try:
                time.sleep(0.05)
            except Exception:  # noqa: BLE001, S110 - what a hung strategy might do
                pass

    monkeypatch.setattr(search_efficiency, "run_kt", hang)  # the forked workers inherit it
    _toy_cache(tmp_path / "toy.json", "k", 5)
    out = tmp_path / "out"
    out.mkdir()
    started = time.perf_counter()
    assert search_efficiency.main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:pso,optuna:tpe",
                                   "--seeds", "1", "--budgets", "2,4", "--jobs", "1", "--run-limit", "1",
                                   "--out", str(out)]) == 0
    assert time.perf_counter() - started < 60
    report = json.loads((out / "search_efficiency.json").read_text())
    assert report["failed_runs"] == ["kt:pso on toy, seed 0, budget 4: TimeoutError: stopped after 1 s (--run-limit)"]
    assert "optuna:tpe" in report["scores"] and "kt:pso" not in report["scores"]
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(SystemExit):
            search_efficiency.main(["--cache", str(tmp_path / "toy.json"), "--run-limit", bad, "--out", str(out)])


def _strict(text: str) -> dict:
    """JSON that a strict parser reads: no Infinity or NaN."""
    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def _run_with_reuse(tmp_path: Path, earlier: dict) -> dict:
    """The strict-JSON report of kt:pso on ``toy.json`` (1 seed, budgets 2 and 4) beside an
    earlier report's strategies."""
    from benchmarks.search_efficiency import main

    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    out = tmp_path / "out"
    assert main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:pso", "--seeds", "1", "--budgets", "2,4",
                 "--jobs", "1", "--reuse", str(tmp_path / "earlier.json"), "--out", str(out)]) == 0
    return _strict((out / "search_efficiency.json").read_text())


def test_a_cell_without_a_valid_configuration_is_null_in_strict_json_and_behind_on_reuse(tmp_path):
    from benchmarks.search_efficiency import _row_from_json, _row_to_json, main

    ds = Dataset("d", None, None, (), 1.0, False, None, None)
    failed = [(False, None, None)] * 2
    [row] = summarise({("d", "kt:pso"): {(2, 0): failed, (2, 1): failed}}, {"d": ds}, [2])
    assert math.isinf(row["median_ratio"]) and not math.isfinite(row["iqr"])
    written = _strict(json.dumps(_row_to_json(row), allow_nan=False))
    assert written["median_ratio"] is None and written["iqr"] is None
    assert math.isinf(_row_from_json(written)["median_ratio"])

    _toy_cache(tmp_path / "toy.json", "k", 5)
    earlier = {"host": "an earlier host", "results": [
        {"dataset": "toy", "strategy": "swarm", "budget": b, "median_ratio": None, "iqr": None, "evals_to_5pct": None,
         "evals_to_1pct": None, "runs_within_1pct": 0, "seeds": 1} for b in (2, 4)],
        "scores": {"swarm": {"aggregate": 0.0, "toy": 0.0}}, "cpu_by_strategy": {}}
    report = _run_with_reuse(tmp_path, earlier)
    assert [r["median_ratio"] for r in report["results"] if r["strategy"] == "swarm"] == [None, None]
    assert all("-> short by" in t for t in report["targets"] if t.startswith("toy @"))  # nothing found: behind
    # a report from before strict JSON (Infinity, NaN) and one whose swarm has no score on a
    # file (every run failed there) are read, not refused
    older = {**earlier, "results": [{**r, "median_ratio": math.inf, "iqr": math.nan} for r in earlier["results"]],
             "scores": {"swarm": {"aggregate": 0.0}}}
    assert [r["median_ratio"] for r in _run_with_reuse(tmp_path, older)["results"]
            if r["strategy"] == "swarm"] == [None, None]
    for bad in ("1.0", True, [1.0]):
        rows = [{**r, "median_ratio": bad} for r in earlier["results"]]
        (tmp_path / "bad.json").write_text(json.dumps({**earlier, "results": rows}))
        with pytest.raises(SystemExit):
            main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:pso", "--reuse", str(tmp_path / "bad.json"),
                  "--out", str(tmp_path / "out")])


def test_our_mixes_are_reused_only_from_a_report_made_with_the_same_generation_size_and_endgame(
        tmp_path, monkeypatch, capsys):
    from benchmarks.search_efficiency import main

    _toy_cache(tmp_path / "toy.json", "k", 5)
    earlier = {"host": "an earlier host", "results": [
        {"dataset": "toy", "strategy": "swarm", "budget": b, "median_ratio": 1.0, "iqr": 0.0, "evals_to_5pct": 3,
         "evals_to_1pct": 3, "runs_within_1pct": 1, "seeds": 1} for b in (2, 4)],
        "scores": {"swarm": {"aggregate": 0.5, "toy": 0.5}}, "cpu_by_strategy": {},
        "our_runs": {"batch_size": 4, "endgame_share": 0.25}}
    report = _run_with_reuse(tmp_path, earlier)  # the defaults: taken
    assert report["our_runs"] == {"batch_size": 4, "endgame_share": 0.25}
    assert _run_with_reuse(tmp_path, {k: v for k, v in earlier.items() if k != "our_runs"})  # an older report: taken

    def refused(report: dict, *extra: str) -> str:
        (tmp_path / "earlier.json").write_text(json.dumps(report))
        with pytest.raises(SystemExit):
            main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:pso", "--seeds", "1", "--budgets", "2,4",
                  "--reuse", str(tmp_path / "earlier.json"), "--out", str(tmp_path / "refused"), *extra])
        assert not (tmp_path / "refused" / "search_efficiency.json").exists()
        return capsys.readouterr().err

    assert "batch size 8 and endgame share 0.25; this run's would have 4 and 0.25" in refused(
        {**earlier, "our_runs": {"batch_size": 8, "endgame_share": 0.25}})
    assert "this run's would have 16" in refused(earlier, "--batch-size", "16")
    monkeypatch.setenv("SWARM_ENDGAME_SHARE", "0.5")
    assert "endgame share 0.25; this run's would have 4 and 0.5" in refused(earlier)
    monkeypatch.delenv("SWARM_ENDGAME_SHARE")
    for bad in ({"batch_size": 0, "endgame_share": 0.25}, {"batch_size": 4, "endgame_share": 2}, [4, 0.25]):
        assert "its our_runs is not" in refused({**earlier, "our_runs": bad})


def _cache_with(path: Path, entries: dict, **extra) -> Path:
    """A one-parameter cache file ``a`` in 1..len(entries), ``time`` from ``entries`` (a -> time)."""
    path.write_text(json.dumps({"device_name": "toy", "kernel_name": "k", "problem_size": [1], "tune_params_keys": ["a"],
                                "tune_params": {"a": sorted(entries)}, "objective": "time",
                                "cache": {f"{a}": {"a": a, "time": t} for a, t in entries.items()}, **extra}))
    return path


def test_kernel_tuner_and_our_curves_read_failures_as_the_loader_does(tmp_path):
    # The legacy marker (1e20 ms) and a negative time are failures for everyone: not a time
    # that makes the worst valid one 1e20, nor one that Kernel Tuner counts as the best.
    times = {a: float(a) for a in range(1, 21)} | {3: 1e20, 7: 1e20, 9: -5.0}
    ds = load_dataset(_cache_with(tmp_path / "legacy.json", times), tmp_path)
    written = json.loads(ds.json_path.read_text())
    assert list(written)[-1] == "cache"
    assert {k: e["time"] for k, e in written["cache"].items() if isinstance(e["time"], str)} == {
        "3": "RuntimeFailedConfig", "7": "RuntimeFailedConfig", "9": "RuntimeFailedConfig"}
    assert ds.optimum == 1.0 and random_curves({"legacy": ds}, 4)["legacy"][1] == 20.0  # the worst valid time
    trace = run_kt(ds, "random_sample", 0, 20)
    assert all(t is None or 1.0 <= t <= 20.0 for _, t, _ in trace) and sum(ok for ok, _, _ in trace) == 17


def test_a_file_with_nan_samples_and_huge_integers_outside_the_time_is_benchmarked(tmp_path):
    path = _cache_with(tmp_path / "nan.json", {a: float(abs(a - 5) + 1) for a in range(1, 21)})
    data = json.loads(path.read_text())
    data["cache"]["3"]["times"] = [float("nan"), 3.0]  # Kernel Tuner writes NaN where a sample failed
    data["cache"]["4"]["GFLOP/s"] = 10**400
    data["cache"]["6"]["time"] = -10**400  # far below 0: a failure, not the legacy marker
    path.write_text(json.dumps(data))
    ds = load_dataset(path, tmp_path)
    assert ds.optimum == 1.0
    assert json.loads(ds.json_path.read_text())["cache"]["6"]["time"] == "RuntimeFailedConfig"
    assert min(t for ok, t, _ in run_kt(ds, "random_sample", 0, 20) if ok) == 1.0


def test_a_file_whose_cache_is_not_its_last_field_still_runs_under_kernel_tuner(tmp_path):
    path = tmp_path / "sorted.json"
    _cache_with(path, {a: float(abs(a - 5) + 1) for a in range(1, 21)})
    path.write_text(json.dumps(json.loads(path.read_text()), sort_keys=True))  # "tune_params..." after "cache"
    ds = load_dataset(path, tmp_path)
    assert min(t for ok, t, _ in run_kt(ds, "random_sample", 0, 20) if ok) == 1.0


def test_files_and_options_that_cannot_be_benchmarked_are_usage_errors_before_any_run(tmp_path, capsys):
    from benchmarks.search_efficiency import main

    good = _toy_cache(tmp_path / "toy.json", "k", 5)
    (tmp_path / "same").mkdir()
    _toy_cache(tmp_path / "same" / "toy.json", "k", 7)
    (tmp_path / "a_file").write_text("x")
    files = {
        "missing": tmp_path / "missing.json", "directory": tmp_path / "same",
        "no valid entry": _cache_with(tmp_path / "failed.json", {1: "InvalidConfig", 2: "RuntimeFailedConfig"}),
        "one valid": _cache_with(tmp_path / "one.json", {1: 2.0, 2: "InvalidConfig"}),
        "a zero time": _cache_with(tmp_path / "zero.json", {1: 0.0, 2: 1.0}),
        "an integer beyond a float": _cache_with(tmp_path / "huge.json", {1: 10**400, 2: 1.0}),
    }
    for why, path in files.items():
        with pytest.raises(SystemExit):
            main(["--cache", str(path), "--strategies", "kt:random_sample", "--out", str(tmp_path / "out")])
        assert "error: --cache" in capsys.readouterr().err, why
    base = ["--cache", str(good), "--strategies", "kt:random_sample", "--out", str(tmp_path / "out")]
    for bad in (["--cache", str(tmp_path / "same" / "toy.json")], ["--batch-size", "0"], ["--jobs", "100000"],
                ["--run-limit", "0.5"], ["--run-limit", "1e300"], ["--budgets", ""], ["--budgets", "10,10"],
                ["--budgets", "10_0"], ["--budgets", "99999999999999999999"], ["--strategies", "kt:pso,kt:pso"],
                ["--out", str(tmp_path / "a_file")], ["--traces", str(tmp_path / "same")],
                ["--traces", str(tmp_path / "no" / "folder.jsonl")]):
        with pytest.raises(SystemExit):
            main([*base, *bad])
        assert "error:" in capsys.readouterr().err, bad


def test_when_every_run_fails_the_report_lists_them_and_the_temporary_copies_are_removed(tmp_path, monkeypatch):
    import tempfile

    from benchmarks import search_efficiency

    def broken(*args, **kwargs):
        raise RuntimeError("the strategy broke")

    monkeypatch.setattr(search_efficiency, "run_kt", broken)  # the forked workers inherit it
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    _toy_cache(tmp_path / "toy.json", "k", 5)
    out = tmp_path / "out"
    assert search_efficiency.main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:pso", "--seeds", "1",
                                   "--budgets", "2,4", "--jobs", "1", "--out", str(out)]) == 0
    report = _strict((out / "search_efficiency.json").read_text())
    assert report["failed_runs"] == ["kt:pso on toy, seed 0, budget 4: RuntimeError: the strategy broke"]
    assert report["results"] == [] and not (out / "search_efficiency.html").exists()
    assert list((tmp_path / "tmp").iterdir()) == []  # Kernel Tuner's copies went with the run


def test_reuse_and_traces_refuse_values_no_run_can_have(tmp_path):
    from benchmarks.search_efficiency import _read_traces, main

    _toy_cache(tmp_path / "toy.json", "k", 5)
    row = {"dataset": "toy", "strategy": "swarm", "budget": 2, "median_ratio": 1.0, "iqr": 0.0, "evals_to_5pct": 1,
           "evals_to_1pct": 1, "runs_within_1pct": 1, "seeds": 1}
    earlier = {"results": [row, {**row, "budget": 4}], "scores": {"swarm": {"aggregate": 1.0, "toy": 1.0}},
               "cpu_by_strategy": {"swarm": {"cpu_s": 1.0, "evaluations": 4}}}
    bad_reports = [
        *({**earlier, "results": [{**row, **change}, {**row, "budget": 4}]} for change in (
            {"median_ratio": 0.5}, {"iqr": -1.0}, {"runs_within_1pct": 2}, {"evals_to_5pct": "1"}, {"budget": "2"},
            {"dataset": None}, {"strategy": "kt:evil"}, {"median_hv_fraction": "x"})),
        {**earlier, "scores": {"swarm": {"aggregate": 0.9, "zzz": 0.9}}},
        {**earlier, "scores": {"swarm": {"aggregate": 1e308, "toy": 1e308}}},
        {**earlier, "files": {"toy": "0" * 64}},  # measured on another file of the same name
        {**earlier, "files": ["toy"]},
        *({**earlier, "cpu_by_strategy": cpu} for cpu in (None, [], {"swarm": {"cpu_s": "1", "evaluations": 4}},
                                                           {"swarm": {"cpu_s": 1.0}})),
    ]
    for report in bad_reports:
        (tmp_path / "bad.json").write_text(json.dumps(report))
        with pytest.raises(SystemExit):
            main(["--cache", str(tmp_path / "toy.json"), "--strategies", "kt:pso", "--seeds", "1", "--budgets", "2,4",
                  "--reuse", str(tmp_path / "bad.json"), "--out", str(tmp_path / "out")])
    from kernels.interchange.tuning_cache import load_cache

    assert _run_with_reuse(tmp_path, {**earlier, "files": {"toy": load_cache(tmp_path / "toy.json").sha256}})["files"]
    record = ["kt", "toy", "kt:pso", 0, 4, [[True, 1.0, None]], 1.0, 1.0, [], "ab12"]
    for field, value in ((5, [[True, -1.0, None]]), (5, [[True, None, None]]), (5, [[True]]), (5, "abcd"),
                         (6, "x"), (7, float("nan")), (0, "other"), (3, -1), (8, "toy"), (9, 5)):
        bad = list(record)
        bad[field] = value
        (tmp_path / "t.jsonl").write_text(json.dumps(record) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(ValueError, match="line 2 is not a finished run"):
            _read_traces(tmp_path / "t.jsonl")


def _score_cache(path: Path, scores: dict[int, float | str], objective: str = "score") -> Path:
    """A one-parameter file as Kernel Tuner's hyperparameter tuner writes it: no ``time``, the
    objective field (``score``, higher is better) and its ``scores``; a string is a failure."""
    entries = {f"{a}": {"a": a, objective: s, f"{objective}s": [s], "compile_time": 1.0} for a, s in scores.items()}
    path.write_text(json.dumps({"device_name": "x86_64", "kernel_name": "hyperparamtuning_pso", "problem_size": [],
                                "tune_params_keys": ["a"], "tune_params": {"a": sorted(scores)},
                                "objective": objective, "cache": entries}))
    return path


@pytest.mark.django_db
def test_a_file_of_scores_is_searched_for_the_highest_score_by_every_strategy(tmp_path, monkeypatch):
    # Scores of Kernel Tuner's hyperparameter tuner: negative ones are valid, the best is the
    # highest (0.4 at a = 7), and no ratio of scores means anything: best/optimum reads the
    # distance from the optimum on the recorded range (1 at the optimum, 2 at the worst).
    import benchmarks.search_efficiency as bench

    monkeypatch.setattr(bench, "_django_ready", True)  # the test database, not the benchmark's own
    scores = {a: round(0.4 - 0.1 * abs(a - 7), 3) for a in range(1, 21)} | {12: "RuntimeFailedConfig"}
    ds = load_dataset(_score_cache(tmp_path / "bench_scores.json", scores), tmp_path)
    assert (ds.field, ds.metric, ds.maximize, ds.reading, ds.span) == ("score", "score", True, "range", (0.4, -0.9))
    assert ds.optimum == 1.0 and ds.cost(-0.9) == 2.0 and ds.cost(-0.25) == pytest.approx(1.5)
    written = json.loads(ds.json_path.read_text())
    assert written["objective"] == "score" and written["cache"]["12"]["score"] == "RuntimeFailedConfig"
    # the whole space (Kernel Tuner leaves the recorded failure out of it): the highest score, as cost 1
    for trace, failures in ((run_kt(ds, "random_sample", 0, 20), 0), (run_optuna_tpe(ds, 0, 20), 1),
                            (run_ours(ds, ("local",), 0, 20, 4), 1)):
        assert len(trace) == 20 - 1 + failures and sum(not ok for ok, _, _ in trace) == failures
        assert min(t for ok, t, _ in trace if ok) == 1.0
    assert random_curves({ds.name: ds}, 4)[ds.name][1] == 2.0  # the worst valid cost
    # Kernel Tuner climbs up the scores: on 900 points, 100 evaluations reach the top (told to
    # minimise, this run ends 10% of the range below it)
    entries = {f"{a},{b}": {"a": a, "b": b, "score": -(abs(a - 20) + abs(b - 20)) / 10} for a in range(30) for b in range(30)}
    wide = tmp_path / "bench_wide_scores.json"
    wide.write_text(json.dumps({"device_name": "x86_64", "kernel_name": "k", "problem_size": [], "tune_params_keys": ["a", "b"],
                                "tune_params": {"a": list(range(30)), "b": list(range(30))}, "objective": "score",
                                "cache": entries}))
    ds = load_dataset(wide, tmp_path)
    assert min(t for ok, t, _ in run_kt(ds, "adaptive_tabu_greywolf", 0, 100) if ok) == 1.0


@pytest.mark.parametrize("scale", [1.0, 1e10, 1e-10])
def test_a_file_of_a_positive_rate_reads_best_over_optimum_as_the_rates_inverse_ratio(tmp_path, scale):
    # GFLOP/s (or FLOP/s at 1e10) with the best at a = 5: best/optimum is how many times slower,
    # whatever the magnitude of the rates
    rates = {a: scale * (100 - 4 * abs(a - 5)) for a in range(1, 21)}
    ds = load_dataset(_score_cache(tmp_path / "bench_rates.json", rates, "GFLOP/s"), tmp_path)
    assert (ds.field, ds.metric, ds.maximize, ds.reading) == ("GFLOP/s", "gflops", True, "ratio")
    assert ds.optimum == 1.0 and best_ratio([(True, ds.cost(50.0 * scale), None)], 1, ds.optimum) == pytest.approx(2.0)
    trace = run_kt(ds, "random_sample", 0, 20)
    assert min(t for ok, t, _ in trace if ok) == pytest.approx(1.0)
    assert evals_to(trace, 20, ds.optimum, 0.01) == 1 + next(i for i, (_, t, _) in enumerate(trace) if t == pytest.approx(1.0))
    curves = random_curves({ds.name: ds}, 20)
    scores = scores_of({"kt:random_sample": {ds.name: run_scores([best_so_far([t for _, t, _ in trace], 20, curves[ds.name][1])],
                                                                    curves[ds.name][0], ds.optimum)}})
    assert scores["kt:random_sample"][ds.name] < 0.9  # random search is not the optimum at once


def test_best_over_optimum_of_a_score_does_not_depend_on_where_its_zero_lies(tmp_path):
    # the same landscape of scores, shifted: the worst reads alike (2.0), whether or not all are positive
    worst = []
    for shift in (0.0, 0.21, -5.0):
        scores = {a: round(0.3 - 0.1 * abs(a - 4) + shift, 3) for a in range(1, 11)}
        ds = load_dataset(_score_cache(tmp_path / f"bench_shift_{len(worst)}.json", scores), tmp_path)
        worst.append(ds.cost(min(scores.values())))
    assert worst == [2.0, 2.0, 2.0]


def test_an_entry_outside_the_search_space_is_neither_the_optimum_nor_a_random_draw(tmp_path):
    # a = 32 is recorded (the fastest) but not in tune_params: no strategy can propose it
    path = _cache_with(tmp_path / "bench_outside.json", {a: float(abs(a - 5) + 1) for a in range(1, 21)})
    data = json.loads(path.read_text())
    data["cache"]["32"] = {"a": 32, "time": 0.5}
    path.write_text(json.dumps(data))
    ds = load_dataset(path, tmp_path)
    assert ds.optimum == 1.0 and random_curves({ds.name: ds}, 20)[ds.name][0][-1] == pytest.approx(1.0)
    for trace in (run_kt(ds, "random_sample", 0, 20), run_optuna_tpe(ds, 0, 20)):
        assert len(trace) == 20 and min(t for ok, t, _ in trace if ok) == 1.0
