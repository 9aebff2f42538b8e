"""The landscape-difficulty figures, on small recorded spaces whose answers are known."""

import json
import math

import pytest

from benchmarks import landscape


def _cache(tmp_path, name, times):
    """A Kernel Tuner cache file over A, B in {1, 2, 3} with ``times[(a, b)]`` (ms)."""
    cache = {f"{a},{b}": {"A": a, "B": b, "time": t} for (a, b), t in times.items()}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"device_name": "test", "tune_params_keys": ["A", "B"],
                                "tune_params": {"A": [1, 2, 3], "B": [1, 2, 3]}, "cache": cache}))
    return path


def test_a_lone_spike_is_measured_as_one(tmp_path):
    # The optimum (3, 3) is surrounded by slow neighbours; the far corner is nearly as fast.
    times = {(3, 3): 1.0, (3, 1): 2.0, (3, 2): 2.0, (1, 3): 2.0, (2, 3): 2.0,
             (1, 1): 1.2, (1, 2): 1.3, (2, 1): 1.25, (2, 2): 1.5}
    row = landscape.describe(_cache(tmp_path, "spike", times))
    assert row["configurations"] == 9 and row["failed"] == 0
    assert row["second_best"] == pytest.approx(1.2) and row["best_neighbour"] == pytest.approx(2.0)
    assert row["neighbour_rank"] == 6  # five configurations are faster than its best neighbour
    assert row["within_1pct"] == row["within_5pct"] == 1 and row["random_evals_1pct"] == pytest.approx(5.0)
    assert row["fdc"] < 0  # deceptive: the farther from the optimum, the faster


def test_a_smooth_bowl_has_high_correlations(tmp_path):
    times = {(a, b): 1.0 + 0.1 * ((3 - a) + (3 - b)) for a in (1, 2, 3) for b in (1, 2, 3)}
    row = landscape.describe(_cache(tmp_path, "bowl", times))
    assert row["best_neighbour"] == pytest.approx(1.1) and row["neighbour_rank"] == 2
    assert row["fdc"] > 0.8 and row["neighbour_corr"] > 0.5


def test_the_command_writes_its_table_and_json(tmp_path, capsys):
    times = {(a, b): 1.0 + a + b for a in (1, 2, 3) for b in (1, 2, 3)}
    path = _cache(tmp_path, "plain", times)
    assert landscape.main(["--cache", str(path), "--out", str(tmp_path / "out"), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["dataset"] for r in payload["results"]] == ["plain"]
    assert math.isfinite(payload["results"][0]["fdc"])
    assert "| plain | time | 9 |" in (tmp_path / "out" / "landscape.md").read_text()


def test_files_without_valid_times_or_not_caches_are_refused_clearly(tmp_path, capsys):
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps({"tune_params_keys": ["A"], "tune_params": {"A": [1, 2]},
                                  "cache": {"1": {"A": 1, "time": "RuntimeFailedConfig"}}}))
    with pytest.raises(SystemExit):
        landscape.main(["--cache", str(failed), "--out", str(tmp_path)])
    assert "no configuration with a valid time" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        landscape.main(["--cache", str(tmp_path / "missing.json"), "--out", str(tmp_path)])
    assert "missing.json" in capsys.readouterr().err
    single = _cache(tmp_path, "single", {(1, 1): 2.0})
    row = landscape.describe(single)
    assert row["second_best"] is None and row["best_neighbour"] is None and row["fdc"] is None


def test_entries_outside_the_space_and_legacy_markers_are_left_out_as_the_search_benchmark_leaves_them(tmp_path):
    path = tmp_path / "outside.json"
    path.write_text(json.dumps({"tune_params_keys": ["A"], "tune_params": {"A": [1, 2, 3]},
                                "cache": {"1": {"A": 1, "time": 2.0}, "2": {"A": 2, "time": 1e20},
                                          "3": {"A": 3, "time": 4.0}, "9": {"A": 9, "time": 0.5}}}))
    row = landscape.describe(path)
    # A = 9 cannot be proposed (tune_params lacks it), and 1e20 is the old caches' failure marker.
    assert (row["configurations"], row["failed"], row["outside"]) == (2, 1, 1)
    assert row["second_best"] == pytest.approx(2.0) and row["objective"] == "time"


def test_a_file_of_scores_is_described_on_its_score_in_its_direction(tmp_path, capsys):
    # benchmark_hub's hyperparameter caches record a score, higher is better, and no time.
    scores = {(a, b): 0.1 * (a + b) - 0.5 for a in (1, 2, 3) for b in (1, 2, 3)}  # best 0.1 at (3, 3), worst -0.3
    cache = {f"{a},{b}": {"A": a, "B": b, "score": v} for (a, b), v in scores.items()}
    path = tmp_path / "scores.json"
    path.write_text(json.dumps({"device_name": "test", "objective": "score", "objective_higher_is_better": True,
                                "tune_params_keys": ["A", "B"], "tune_params": {"A": [1, 2, 3], "B": [1, 2, 3]},
                                "cache": cache}))
    row = landscape.describe(path)
    assert row["objective"] == "score (max, range)" and row["configurations"] == 9
    # the runner-up is a quarter of the range below the optimum: 1.25 in the benchmark's reading
    assert row["second_best"] == pytest.approx(1.25) and row["best_neighbour"] == pytest.approx(1.25)
    assert row["within_1pct"] == 1 and row["fdc"] > 0.8  # higher scores lie nearer the optimum
    shifted = tmp_path / "shifted.json"
    shifted.write_text(json.dumps({**json.loads(path.read_text()), "cache": {
        k: {**e, "score": e["score"] + 100} for k, e in cache.items()}}))
    again = landscape.describe(shifted)  # a score's zero is arbitrary
    assert {k: pytest.approx(v) for k, v in again.items() if k != "dataset"} == \
        {k: v for k, v in row.items() if k != "dataset"}
    assert landscape.main(["--cache", str(path), "--out", str(tmp_path / "out"), "--json"]) == 0
    assert "| scores | score (max, range) | 9 |" in (tmp_path / "out" / "landscape.md").read_text()
    capsys.readouterr()
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps({"objective": "score", "tune_params_keys": ["A"], "tune_params": {"A": [1, 2]},
                                  "cache": {"1": {"A": 1, "score": "RuntimeFailedConfig"}}}))
    with pytest.raises(SystemExit):
        landscape.main(["--cache", str(failed), "--out", str(tmp_path)])
    assert "no configuration with a valid 'score'" in capsys.readouterr().err


def test_a_time_of_zero_is_refused_as_the_search_benchmark_refuses_it(tmp_path, capsys):
    times = {(a, b): float(a + b) for a in (1, 2, 3) for b in (1, 2, 3)}
    times[(1, 1)] = 0.0  # the loader reads it as valid: the optimum, with no ratio to it
    with pytest.raises(SystemExit):
        landscape.main(["--cache", str(_cache(tmp_path, "zero", times)), "--out", str(tmp_path)])
    assert "records a time of 0 ms; times must be > 0" in capsys.readouterr().err


def test_true_and_1_are_two_values_whose_configurations_are_neighbours(tmp_path):
    times = {"0,1": 1.0, "False,1": 1.05, "1,1": 3.0, "0,2": 2.0, "False,2": 2.5, "1,2": 4.0}
    cache = {k: {"A": json.loads(k.split(",")[0].lower()), "B": int(k.split(",")[1]), "time": t}
             for k, t in times.items()}
    path = tmp_path / "flags.json"
    path.write_text(json.dumps({"tune_params_keys": ["A", "B"], "tune_params": {"A": [0, False, 1], "B": [1, 2]},
                                "cache": cache}))
    row = landscape.describe(path)
    assert row["configurations"] == 6
    assert row["best_neighbour"] == pytest.approx(1.05) and row["neighbour_rank"] == 2
