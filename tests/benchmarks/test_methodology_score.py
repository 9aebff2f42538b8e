"""The autotuning methodology's score, on spaces whose answers can be counted by hand."""

import itertools

import numpy as np
import pytest

from benchmarks.methodology_score import best_so_far, random_search_curve, run_scores, standard_error, standardised_score


def test_random_curve_is_the_expected_best_of_draws_without_replacement():
    values = [3.0, 1.0, None, 2.0]  # one failure
    curve = random_search_curve(values, 5)
    for t in (1, 2, 3):  # enumerate every subset of t draws; a subset of failures finds the worst (3.0)
        subsets = list(itertools.combinations(values, t))
        expected = np.mean([min((v for v in s if v is not None), default=3.0) for s in subsets])
        assert curve[t - 1] == pytest.approx(expected)
    assert curve[3] == curve[4] == 1.0  # the whole space drawn


def test_random_curve_rejects_a_space_without_valid_values():
    with pytest.raises(ValueError, match="no valid"):
        random_search_curve([None, None], 3)
    with pytest.raises(ValueError, match="horizon"):
        random_search_curve([1.0], 0)


def test_best_so_far_fills_the_start_with_the_worst_and_keeps_the_end():
    assert best_so_far([None, 5.0, 7.0, 2.0], 6, worst=9.0).tolist() == [9.0, 5.0, 5.0, 2.0, 2.0, 2.0]


def test_score_is_zero_for_random_search_and_one_for_the_optimum():
    rand = np.array([4.0, 3.0, 2.0])
    assert standardised_score([rand], rand, 1.0) == pytest.approx(0.0)
    assert standardised_score([np.ones(3)], rand, 1.0) == pytest.approx(1.0)
    # halfway between random and the optimum at every t, averaged over two runs
    assert standardised_score([np.array([2.5, 2.0, 1.5]), np.array([2.5, 2.0, 1.5])], rand, 1.0) == pytest.approx(0.5)
    # worse than random search: negative
    assert standardised_score([np.array([7.0, 5.0, 3.0])], rand, 1.0) == pytest.approx(-1.0)


def test_score_leaves_out_budgets_where_random_search_expects_the_optimum():
    rand = np.array([3.0, 1.0])
    assert standardised_score([np.array([2.0, 1.0])], rand, 1.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="shape"):
        standardised_score([np.ones(3)], rand, 1.0)


def test_the_runs_own_scores_average_to_the_score_and_give_its_standard_error():
    rand = np.array([4.0, 3.0, 2.0])
    runs = [np.ones(3), rand, np.array([2.5, 2.0, 1.5])]  # scores 1, 0 and 0.5
    assert run_scores(runs, rand, 1.0) == pytest.approx([1.0, 0.0, 0.5])
    assert standardised_score(runs, rand, 1.0) == pytest.approx(0.5)
    # one file: the sample deviation over the root of the runs (0.5 / sqrt 3)
    assert standard_error([[1.0, 0.0, 0.5]]) == pytest.approx(0.5 / np.sqrt(3))
    # two files scored independently: the aggregate is their mean, its variance a quarter of the sum
    assert standard_error([[1.0, 0.0, 0.5], [0.2, 0.4]]) == pytest.approx(np.sqrt(0.25 / 3 + 0.02 / 2) / 2)
    assert standard_error([[1.0, 0.0], [0.3]]) is None  # one run: no spread to estimate
    assert standard_error([]) is None
    with pytest.raises(ValueError, match="no runs"):
        run_scores([], rand, 1.0)
