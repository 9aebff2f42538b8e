"""The verdict over per-round ratios and the noise floor's arithmetic and store."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from kernels.comparison.noise_floor import MIN_FLOOR, FileFloorStore, floor_from_ratios, floor_key
from kernels.comparison.verdict import judge_rounds


def test_ratios_at_one_are_a_tie_whatever_the_floor():
    for floor in (0.0, 0.01, 0.2):
        v = judge_rounds([1.0] * 6, floor)
        assert v.verdict == "tie" and v.ratio == 1.0 and v.p_value == 1.0 and v.rounds_needed is None


def test_a_clear_difference_is_called_in_both_directions():
    rng = np.random.default_rng(1)
    slower = list(1.5 * np.exp(rng.normal(0, 0.01, 8)))
    v = judge_rounds(slower, 0.02)
    assert v.verdict == "a_faster" and 1.45 < v.ratio < 1.55 and v.ci[0] > 1.02
    w = judge_rounds([1 / r for r in slower], 0.02)
    assert w.verdict == "b_faster" and w.ci[1] < 1 / 1.02
    assert "A is faster" in v.why and "B is faster" in w.why


def test_a_difference_inside_the_floor_is_a_tie_that_no_rounds_resolve():
    v = judge_rounds([1.03, 1.031, 1.029, 1.03, 1.032, 1.028], 0.05)
    assert v.verdict == "tie" and v.rounds_needed is None and "no number of rounds" in v.why


def test_the_interval_must_clear_the_floor_not_just_one():
    """Significant (every round above 1) but the interval reaches into the floor band: tie."""
    v = judge_rounds([1.012, 1.018, 1.03, 1.011, 1.025, 1.04], 0.02)
    assert v.verdict == "tie"
    assert v.ci[0] < 1.02 < v.ci[1]


def test_rounds_needed_follows_the_spread():
    rng = np.random.default_rng(3)
    noisy = list(1.06 * np.exp(rng.normal(0, 0.05, 5)))
    v = judge_rounds(noisy, 0.01)
    if v.verdict == "tie":
        assert v.rounds_needed is not None and v.rounds_needed > 5 and f"about {v.rounds_needed} rounds" in v.why
    tight = judge_rounds(list(1.06 * np.exp(rng.normal(0, 0.002, 5))), 0.01)
    assert tight.verdict == "a_faster" and tight.rounds_needed <= 5


def test_one_outlying_round_does_not_decide():
    v = judge_rounds([1.0, 1.001, 0.999, 1.0, 1.002, 0.998, 1.001, 1.6], 0.01)
    assert v.verdict == "tie" and abs(v.ratio - 1) < 0.002


def test_the_same_rounds_give_the_same_verdict():
    r = [1.02, 0.99, 1.05, 1.01, 0.97]
    assert judge_rounds(r, 0.01) == judge_rounds(r, 0.01)


@pytest.mark.parametrize("ratios, floor, message", [
    ([1.0], 0.01, "at least 2 rounds"),
    ([1.0, 0.0], 0.01, "positive and finite"),
    ([1.0, math.inf], 0.01, "positive and finite"),
    ([1.0, 1.0], -0.1, "noise_floor"),
    ([1.0, 1.0], math.nan, "noise_floor"),
])
def test_bad_input_is_refused_with_its_reason(ratios, floor, message):
    with pytest.raises(ValueError, match=message):
        judge_rounds(ratios, floor)


def test_the_floor_is_where_the_a_over_a_interval_reaches():
    assert floor_from_ratios([1.0] * 12) == MIN_FLOOR
    aa = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.005, 0.995, 1.015, 0.985, 1.0, 1.0]
    f = floor_from_ratios(aa)
    v = judge_rounds(aa, 0.0)
    assert math.isclose(f, max(MIN_FLOOR, math.expm1(max(-math.log(v.ci[0]), math.log(v.ci[1])))))
    assert 0.005 <= f < 0.03
    with pytest.raises(ValueError):
        floor_from_ratios([1.0])


def test_the_file_store_keeps_floors_and_survives_a_damaged_file(tmp_path):
    path = tmp_path / "f.json"
    store = FileFloorStore(path)
    key = floor_key("cpu-x86_64", {"cpu_model": "X"}, "rmsnorm", "llama3-8b")
    assert store.get(key) is None
    store.put(key, {"floor": 0.02, "aa_ratios": [1.0, 1.01], "rounds": 2})
    assert store.get(key)["floor"] == 0.02 and "measured_at" in store.get(key)
    assert floor_key("cpu-x86_64", {"cpu_model": "Y"}, "rmsnorm", "llama3-8b") != key
    path.write_text("{not json")
    assert store.get(key) is None
    store.put(key, {"floor": 0.03})
    assert store.get(key)["floor"] == 0.03
    path.write_text(json.dumps({key: {"floor": "high"}}))
    assert store.get(key) is None


def test_a_tie_never_says_fewer_rounds_would_have_resolved_it():
    """Rounds with a slow cluster: the bootstrap interval is wider than a normal-theory width
    from the MAD, so an estimate from the MAD alone asked for fewer rounds than the tie had."""
    r = [1.0479, 1.0489, 1.0396, 1.0381, 1.0388, 1.0036, 1.0428, 1.0052, 1.0104, 1.0486]
    v = judge_rounds(r, 0.02)
    assert v.verdict == "tie"
    assert v.rounds_needed is not None and v.rounds_needed > len(r), v.why
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(3, 16))
        rounds = list(np.exp(rng.normal(0.03, 0.015, n) - (rng.random(n) < 0.25) * 0.03))
        v = judge_rounds(rounds, 0.02, n_boot=2000)
        if v.verdict == "tie" and v.rounds_needed is not None:
            assert v.rounds_needed > n, v.why
        elif v.verdict != "tie":
            assert v.rounds_needed is not None and v.rounds_needed <= n, v.why
