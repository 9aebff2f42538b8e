"""Summary statistics of timing samples (numpy only)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    rng = np.random.default_rng(seed)
    boot = np.median(a[rng.integers(0, a.size, size=(n_boot, a.size))], axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    return {
        "median": float(med),
        "iqr": float(q3 - q1),
        "ci_low": float(lo),
        "ci_high": float(hi),
        "n": int(a.size),
    }
