"""Statistics of timing samples: summaries and significance of a speed difference.

Methods and sources:

- Median and inter-quartile range (``numpy.percentile``, linear interpolation).
- Confidence interval of the median: the percentile bootstrap (Efron, "Bootstrap methods:
  another look at the jackknife", Ann. Statist. 7(1), 1979, doi:10.1214/aos/1176344552;
  Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13): resample the
  samples with replacement ``n_boot`` times, take the median of each resample, report the
  ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles. Seeded, so the same
  samples always give the same interval. With fewer than about 10 samples the interval is
  coarse (it can only take sample values). The resampling indices depend only on the sample
  count and the seed, so each resample's median is read from cached occurrence counts and
  the sorted samples (same values as drawing the resamples, a fraction of the time).
- "Is A faster than B": a one-sided Mann-Whitney U test (Mann & Whitney, "On a test of
  whether one of two random variables is stochastically larger than the other", Ann. Math.
  Statist. 18(1), 1947, doi:10.1214/aoms/1177730491), via ``scipy.stats.mannwhitneyu``,
  which makes no normality assumption (timing samples are skewed, with a long right tail),
  plus a percentile-bootstrap interval of the speedup ``median(B) / median(A)`` resampling
  both sides independently, as recommended for benchmark ratios by Kalibera & Jones,
  "Rigorous benchmarking in reasonable time", ISMM 2013, doi:10.1145/2464157.2464160.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Comparison", "compare", "summarize"]


def summarize(
    samples_ms: Sequence[float], *, confidence: float = 0.95, n_boot: int = 1000, seed: int = 0
) -> dict[str, float]:
    """Median, inter-quartile range and a bootstrap confidence interval of the median.

    Args:
        samples_ms: raw timings in ms (non-empty).
        confidence: two-sided level of the percentile bootstrap interval.
        n_boot: bootstrap resamples.
        seed: RNG seed, so the same samples always give the same interval.

    Returns:
        ``{"median", "iqr", "ci_low", "ci_high"}`` in ms and ``"n"`` (sample count).

    Raises:
        ValueError: no samples.
    """
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        raise ValueError("summarize: no samples")
    alpha = (1.0 - confidence) / 2.0
    if a.ndim != 1 or n_boot < 1 or a.size * n_boot > _COUNTS_MAX_CELLS or not np.isfinite(a).all():
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        rng = np.random.default_rng(seed)
        boot = np.median(a[rng.integers(0, a.size, size=(n_boot, a.size))], axis=1)
        lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    else:
        s = np.sort(a)
        q1, med, q3 = (_sorted_quantile(s, q) for q in (0.25, 0.5, 0.75))
        boot = np.sort(_bootstrap_medians(a, s, n_boot, seed))
        lo, hi = _sorted_quantile(boot, alpha), _sorted_quantile(boot, 1.0 - alpha)
    return {
        "median": float(med),
        "iqr": float(q3 - q1),
        "ci_low": float(lo),
        "ci_high": float(hi),
        "n": int(a.size),
    }


#: Largest ``n x n_boot`` summarised with cached resampling counts (int16, 8 MB at most).
_COUNTS_MAX_CELLS = 4_000_000


@functools.lru_cache(maxsize=8)
def _resample_counts(n: int, n_boot: int, seed: int) -> np.ndarray:
    """``counts[i, b]``: how often sample ``i`` occurs in bootstrap resample ``b`` when the
    resamples are drawn as ``default_rng(seed).integers(0, n, size=(n_boot, n))``. The
    resampling indices depend only on (n, n_boot, seed), never on the values, so they are
    drawn once per process and shared by every summary of that size."""
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    flat = idx * n_boot + np.arange(n_boot)[:, None]  # cell (i, b) of the n x n_boot table
    counts = np.bincount(flat.ravel(), minlength=n * n_boot).astype(np.int16).reshape(n, n_boot)
    counts.flags.writeable = False
    return counts


def _bootstrap_medians(a: np.ndarray, s: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """``np.median(a[idx], axis=1)`` for the seeded resampling indices ``idx``, computed from
    occurrence counts: with the samples in ascending order, resample ``b``'s ``k``-th smallest
    value is ``s[j]`` for the first ``j`` whose cumulative count exceeds ``k``. Exactly the
    same values as resampling, without drawing or sorting ``n_boot x n`` numbers."""
    n = a.size
    cum = _resample_counts(n, n_boot, seed)[np.argsort(a, kind="stable")]  # a copy, rows in value order
    if n <= 64:
        for i in range(1, n):
            np.add(cum[i], cum[i - 1], out=cum[i])
    else:
        np.cumsum(cum, axis=0, out=cum)
    h = n // 2
    upper = s[np.count_nonzero(cum <= h, axis=0)]
    if n % 2:
        return upper
    return (s[np.count_nonzero(cum <= h - 1, axis=0)] + upper) / 2


def _sorted_quantile(s: np.ndarray, q: float) -> float:
    """``np.quantile(s, q)`` (linear method) of an ascending, finite array, with the same
    floating-point operations as NumPy's ``_lerp``."""
    n = s.size
    v = (n - 1) * q
    if v >= n - 1:
        return float(s[-1])
    i = math.floor(v)
    if v < 0:
        return float(s[0])
    lo, hi = float(s[i]), float(s[i + 1])
    gamma = v - i
    diff = hi - lo
    return hi - diff * (1 - gamma) if gamma >= 0.5 else lo + diff * gamma


@dataclass(frozen=True)
class Comparison:
    """Whether candidate A is faster than B, with the evidence for it.

    Attributes:
        faster: True iff ``p_value < alpha`` and ``ci_low > min_speedup``: A's latencies are
            significantly lower (one-sided Mann-Whitney U) *and* the whole bootstrap interval
            of the speedup lies above ``min_speedup``.
        speedup: ``median_b_ms / median_a_ms`` (> 1: A is faster).
        ci_low, ci_high: two-sided ``1 - alpha`` percentile-bootstrap interval of ``speedup``.
        p_value: one-sided Mann-Whitney U p-value for "A's latencies are stochastically
            smaller than B's".
        median_a_ms, median_b_ms: medians in ms.
        n_a, n_b: sample counts.
        alpha: significance level used.
        min_speedup: the speedup the interval had to exceed.
    """

    faster: bool
    speedup: float
    ci_low: float
    ci_high: float
    p_value: float
    median_a_ms: float
    median_b_ms: float
    n_a: int
    n_b: int
    alpha: float
    min_speedup: float

    def to_dict(self) -> dict:
        return asdict(self)


def compare(
    samples_a_ms: Sequence[float],
    samples_b_ms: Sequence[float],
    *,
    alpha: float = 0.05,
    min_speedup: float = 1.0,
    n_boot: int = 2000,
    seed: int = 0,
) -> Comparison:
    """Is A faster than B, with statistical significance? Used for promotions.

    Args:
        samples_a_ms: raw latencies (ms) of A, e.g. ``Evidence.samples_ms[label]``.
        samples_b_ms: raw latencies (ms) of B (the incumbent).
        alpha: significance level of the test, and ``1 - alpha`` is the interval's level.
        min_speedup: the lower end of the speedup interval must exceed this (1.0: any real
            speedup; 1.02: at least 2%).
        n_boot: bootstrap resamples of the speedup interval.
        seed: RNG seed of the bootstrap (deterministic results).

    Returns:
        :class:`Comparison`.

    Raises:
        ValueError: an empty or non-finite sample, a non-positive median, ``alpha`` outside
            (0, 1), or ``min_speedup <= 0``.
        ImportError: scipy is missing (a dependency of the project).
    """
    from scipy.stats import mannwhitneyu  # noqa: PLC0415  (import-light package)

    a = np.asarray(samples_a_ms, dtype=np.float64)
    b = np.asarray(samples_b_ms, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("compare: both samples must be non-empty")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("compare: samples must be finite")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"compare: alpha must be in (0, 1), got {alpha}")
    if not min_speedup > 0:
        raise ValueError(f"compare: min_speedup must be > 0, got {min_speedup}")
    med_a, med_b = float(np.median(a)), float(np.median(b))
    if med_a <= 0 or med_b <= 0:
        raise ValueError("compare: medians must be positive (latencies in ms)")
    p = float(mannwhitneyu(a, b, alternative="less").pvalue)
    if not math.isfinite(p):
        p = 1.0  # e.g. every sample identical: no evidence either way
    rng = np.random.default_rng(seed)
    boot_a = np.median(a[rng.integers(0, a.size, size=(n_boot, a.size))], axis=1)
    boot_b = np.median(b[rng.integers(0, b.size, size=(n_boot, b.size))], axis=1)
    ratios = boot_b / boot_a
    lo, hi = np.quantile(ratios, [alpha / 2.0, 1.0 - alpha / 2.0])
    speedup = med_b / med_a
    return Comparison(
        faster=bool(p < alpha and lo > min_speedup),
        speedup=speedup,
        ci_low=float(lo),
        ci_high=float(hi),
        p_value=p,
        median_a_ms=med_a,
        median_b_ms=med_b,
        n_a=int(a.size),
        n_b=int(b.size),
        alpha=alpha,
        min_speedup=min_speedup,
    )
