"""The aggregate score of the auto-tuning methodology, over function evaluations.

After Willemsen, Schoonhoven, Filipovič, Tørring, van Nieuwpoort & van Werkhoven, "A
methodology for comparing optimization algorithms for auto-tuning", Future Generation
Computer Systems 159 (2024), as implemented in the ``autotuning-methodology`` package
(``baseline.Baseline.get_standardised_curves``; the aggregate is the mean of the standardised
curve): per search space, a strategy's performance curve ``P(t)`` (best objective found within
``t`` evaluations, averaged over repeated runs) is standardised against the curve ``R(t)`` of
random search without replacement and the optimum ``opt``::

    S(t) = (P(t) - R(t)) / (opt - R(t))          0: as random search, 1: the optimum

and the score is the mean of ``S(t)`` over ``t = 1..T``, then over search spaces. The package
computes ``R`` from order statistics ("red-white" index ``M (N + 1) / (M + 1)``); here it is
the exact expectation of the best of ``t`` draws without replacement from the recorded
configurations (failures are draws that find nothing). A run that has found no valid
configuration yet, and random search in that case, count the worst recorded valid value.
The package itself is not a dependency: it is an experiment runner (matplotlib, yappi,
nonconformist, ...) around this formula.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def random_search_curve(values: Sequence[float | None], horizon: int) -> np.ndarray:
    """Expected best (minimum) of ``t`` uniform draws without replacement, for ``t = 1..horizon``.

    Args:
        values: the objective of every configuration of the space; None for a failure.
        horizon: the largest number of draws (>= 1).

    Returns:
        array of shape ``(horizon,)``; past the space's size it stays at the optimum.

    Raises:
        ValueError: ``horizon < 1`` or no valid value.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    valid = np.sort(np.array([v for v in values if v is not None], dtype=np.float64))
    if not len(valid):
        raise ValueError("the space has no valid configuration")
    n, m, worst = len(values), len(valid), float(valid[-1])
    j = np.arange(m + 1)  # P(none of the j best valid values is among t draws) = C(n-j, t) / C(n, t)
    lg = np.vectorize(math.lgamma)
    curve = np.empty(horizon)
    for t in range(1, horizon + 1):
        if t >= n:
            curve[t - 1] = valid[0]
            continue
        ok = n - j >= t
        none = np.zeros(m + 1)
        jj = j[ok]
        none[ok] = np.exp(lg(n - jj + 1.0) - lg(n - jj - t + 1.0) - lg(n + 1.0) + lg(n - t + 1.0))
        p_best = none[:-1] - none[1:]  # the j-th best valid value is the best drawn
        curve[t - 1] = float(p_best @ valid + none[m] * worst)
    return curve


def best_so_far(objectives: Sequence[float | None], horizon: int, worst: float) -> np.ndarray:
    """Best objective within ``t`` evaluations, ``t = 1..horizon``, shape ``(horizon,)``.

    ``objectives``: one run's evaluations in order (None for a failure); ``worst`` fills the
    evaluations before the first valid one; a run shorter than ``horizon`` (its strategy
    stopped) keeps its last best.
    """
    out = np.full(horizon, worst, dtype=np.float64)
    best = worst
    for i in range(horizon):
        if i < len(objectives) and objectives[i] is not None:
            best = min(best, float(objectives[i]))
        out[i] = best
    return out


def standardised_score(runs: Sequence[np.ndarray], random_curve: np.ndarray, optimum: float) -> float:
    """Mean over ``t`` of ``(P(t) - R(t)) / (opt - R(t))``, ``P`` the mean of ``runs``' curves.

    Evaluation counts at which random search already expects the optimum are left out (the
    ratio is undefined there). The score is linear in ``P``, so it is also the mean of
    :func:`run_scores`.

    Raises:
        ValueError: no runs, or curves of another length than ``random_curve``.
    """
    return float(np.mean(run_scores(runs, random_curve, optimum)))


def run_scores(runs: Sequence[np.ndarray], random_curve: np.ndarray, optimum: float) -> np.ndarray:
    """Each run's own standardised score (:func:`standardised_score` of that run alone),
    ``float64 [len(runs)]``: their spread is what the score of a few runs is uncertain by.

    Raises:
        ValueError: no runs, or curves of another length than ``random_curve``.
    """
    if not len(runs):
        raise ValueError("no runs to score")
    curves = np.asarray(runs, dtype=np.float64)
    if curves.shape[1:] != random_curve.shape:
        raise ValueError(f"curves of shape {curves.shape[1:]} against a random curve of {random_curve.shape}")
    gap = optimum - random_curve
    keep = np.abs(gap) > 1e-12 * max(abs(optimum), 1.0)
    if not keep.any():
        return np.ones(len(curves))
    return np.mean((curves[:, keep] - random_curve[keep]) / gap[keep], axis=1)


def standard_error(per_file: Sequence[Sequence[float]]) -> float | None:
    """Standard error of the aggregate score (the mean over files of the mean over each file's
    runs) from the runs' own scores (:func:`run_scores`), one sequence per file: the files are
    scored independently, so ``sqrt(sum_f s_f^2 / n_f) / F``, ``s_f`` the sample standard
    deviation of file ``f``'s ``n_f`` runs. With one file it is that file's own. None where a
    file has fewer than two runs (no spread to estimate).
    """
    if not per_file or any(len(v) < 2 for v in per_file):
        return None
    variance = sum(float(np.var(np.asarray(v, dtype=np.float64), ddof=1)) / len(v) for v in per_file)
    return float(np.sqrt(variance) / len(per_file))
