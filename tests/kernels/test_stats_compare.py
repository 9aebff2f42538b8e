"""stats.summarize and stats.compare on synthetic samples whose answer is known."""

import numpy as np
import pytest

from kernels import Comparison, compare, summarize


def lognormal(median_ms, n, seed, sigma=0.1):
    """Right-skewed timing-like samples with the given median (ms)."""
    return list(median_ms * np.random.default_rng(seed).lognormal(0.0, sigma, n))


def test_a_clearly_faster_candidate_is_faster_with_a_tight_interval():
    a, b = lognormal(1.0, 100, 1), lognormal(1.2, 100, 2)
    c = compare(a, b)
    assert isinstance(c, Comparison)
    assert c.faster
    assert c.p_value < 1e-6
    assert c.speedup == pytest.approx(np.median(b) / np.median(a))
    assert 1.0 < c.ci_low < c.speedup < c.ci_high < 1.45
    assert c.n_a == c.n_b == 100


def test_the_slower_candidate_is_not_faster():
    c = compare(lognormal(1.2, 100, 3), lognormal(1.0, 100, 4))
    assert not c.faster
    assert c.speedup < 1 and c.p_value > 0.5


def test_identical_distributions_are_not_called_faster_more_often_than_alpha():
    wins = sum(compare(lognormal(1.0, 50, 10 + i), lognormal(1.0, 50, 500 + i)).faster for i in range(200))
    assert wins <= 0.05 * 200 + 6  # false positive rate at most about alpha (binomial slack)


def test_a_small_real_speedup_needs_enough_samples():
    """A real 2% speedup under 20% noise: rarely detected with 8 samples, always with 2000."""
    few = sum(compare(lognormal(0.98, 8, i, sigma=0.2), lognormal(1.0, 8, 1000 + i, sigma=0.2)).faster
              for i in range(100))
    assert few <= 25
    many = [compare(lognormal(0.98, 2000, i, sigma=0.2), lognormal(1.0, 2000, 1000 + i, sigma=0.2), n_boot=500)
            for i in range(3)]
    assert all(c.faster and c.ci_low > 1.0 for c in many)


def test_min_speedup_demands_the_whole_interval_above_it():
    a, b = lognormal(1.0, 200, 9, sigma=0.05), lognormal(1.2, 200, 10, sigma=0.05)
    assert compare(a, b, min_speedup=1.1).faster
    assert not compare(a, b, min_speedup=1.3).faster


def test_constant_samples_and_determinism():
    c = compare([1.0] * 10, [1.0] * 10)
    assert not c.faster and c.speedup == 1.0 and c.ci_low == c.ci_high == 1.0
    a, b = lognormal(1.0, 30, 11), lognormal(1.1, 30, 12)
    assert compare(a, b) == compare(a, b)


@pytest.mark.parametrize("a, b, kw, message", [
    ([], [1.0], {}, "non-empty"),
    ([1.0, float("nan")], [1.0], {}, "finite"),
    ([1.0], [1.0], {"alpha": 1.5}, "alpha"),
    ([0.0, 0.0], [1.0], {}, "positive"),
    ([1.0], [1.0], {"min_speedup": 0}, "min_speedup"),
])
def test_bad_input_raises_value_error(a, b, kw, message):
    with pytest.raises(ValueError, match=message):
        compare(a, b, **kw)


def test_the_bootstrap_interval_of_the_median_covers_the_true_median():
    """Percentile bootstrap of the median: about 95% coverage at n=60 (checked over 300 draws)."""
    rng = np.random.default_rng(0)
    hits = 0
    for i in range(300):
        s = summarize(rng.lognormal(0.0, 0.3, 60), seed=i, n_boot=500)  # true median exactly 1
        hits += s["ci_low"] <= 1.0 <= s["ci_high"]
    assert 0.88 <= hits / 300 <= 0.99
