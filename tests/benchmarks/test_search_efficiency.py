"""The statistics of the search-efficiency benchmark, on traces whose answers are known."""

import math
from pathlib import Path

import pytest

from benchmarks.search_efficiency import (
    KT_BUDGET_FREE, Dataset, best_ratio, evals_to, hypervolume, load_dataset, run_kt, summarise, verdict,
)

ENERGY_FILE = Path(__file__).resolve().parents[2].parent / "shared/datasets/tuning-cache/gemm-xgemm-energy_A100-PCIE-40GB_partial.json.gz"


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
    lines = verdict(rows)
    assert any("d @ 1: swarm" in line and "met" in line for line in lines)


@pytest.mark.skipif(not ENERGY_FILE.exists(), reason="needs ../shared/datasets/tuning-cache")
@pytest.mark.parametrize("strategy", sorted(KT_BUDGET_FREE - {"bayes_opt"}))
def test_kernel_tuner_runs_at_a_small_budget_are_prefixes_of_the_run_at_the_largest(strategy, tmp_path):
    # What lets the benchmark run these strategies once, at the largest budget.
    ds = load_dataset(ENERGY_FILE, tmp_path)
    for seed in (0, 1):
        full = run_kt(ds, strategy, seed, 120)
        assert len(full) >= 60
        assert run_kt(ds, strategy, seed, 40) == full[:40]


@pytest.mark.skipif(not ENERGY_FILE.exists(), reason="needs ../shared/datasets/tuning-cache")
def test_simulated_annealing_depends_on_the_budget_so_it_runs_once_per_budget(tmp_path):
    ds = load_dataset(ENERGY_FILE, tmp_path)
    assert "simulated_annealing" not in KT_BUDGET_FREE
    assert run_kt(ds, "simulated_annealing", 0, 40) != run_kt(ds, "simulated_annealing", 0, 120)[:40]
