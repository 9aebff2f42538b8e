"""The verdict of a paired comparison: per-round ratios, their interval, the noise floor.

A paired comparison (:mod:`kernels.comparison.paired`) measures kernels A and B in several *rounds*,
each a fresh pair of sandbox children taking turns call by call; a round gives one ratio
``r_i = median time of B / median time of A`` (over a shape set: the sum of the per-shape
medians, as the goal's ``latency_ms``). Rounds are the unit of replication (Kalibera &
Jones, "Rigorous benchmarking in reasonable time", ISMM 2013, doi:10.1145/2464157.2464160):
calls inside one round share a process, a page placement and a frequency state, so they are
not independent draws, and pooling them overstates the evidence. Everything here is computed
over the per-round log-ratios ``l_i = ln r_i``:

- ``ratio``: ``exp(median(l))``, the median per-round ratio (> 1: A is faster). The median,
  not the mean: a round can land in a different machine state (a thread sharing a core with
  another tenant), and one such round must not decide the verdict.
- ``ci``: percentile-bootstrap interval of ``exp(median(l))``, resampling *rounds* with
  replacement (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13), seeded.
- ``p_value``: two-sided Wilcoxon signed-rank test of "no difference" over the rounds'
  log-ratios (``scipy.stats.wilcoxon``; exact for small round counts).
- The *noise floor* ``f`` of the target (:mod:`kernels.comparison.noise_floor`): how far the interval of
  an A/A comparison (a kernel against itself) reached from 1 on this host. B is called
  faster or slower only when the whole interval lies outside ``[1/(1+f), 1+f]``; otherwise
  the verdict is ``tie``.
- ``rounds_needed``: rounds at which the interval would clear the floor, if the observed
  median and spread hold. The interval's half-width on the side facing the floor, ``w``,
  shrinks as ``1/sqrt(n)`` with the number of rounds ``n`` (the standard error of a median,
  Serfling, *Approximation Theorems of Mathematical Statistics*, 1980, sec. 2.3), so it
  clears the gap ``g = |median(l)| - ln(1+f)`` at ``n' = n * (w / g)**2`` rounds. Scaling
  the measured interval itself (not a normal-theory width) keeps the estimate consistent
  with the verdict: a tie always asks for more rounds than it had, a decided comparison for
  as many or fewer. None when ``g <= 0``: then no number of rounds resolves the difference
  on this host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["VERDICTS", "RoundVerdict", "judge_rounds"]

VERDICTS = ("a_faster", "b_faster", "tie")


@dataclass(frozen=True)
class RoundVerdict:
    """The statistic of one paired comparison over its rounds.

    Attributes:
        verdict: ``"a_faster"`` (B is slower beyond the floor), ``"b_faster"`` or ``"tie"``.
        ratio: median over rounds of ``time(B) / time(A)`` (> 1: A is faster).
        ci: ``[low, high]`` bootstrap interval of ``ratio`` at ``confidence``.
        p_value: two-sided Wilcoxon signed-rank p-value of "no difference" over rounds.
        noise_floor: the floor ``f`` the interval had to clear (a fraction, 0.01 = 1%).
        rounds: rounds measured; round_ratios: each round's ratio, in order.
        rounds_needed: rounds at which the interval would clear the floor (None: never,
            the difference lies inside the floor); equal to ``rounds`` or fewer when it did.
        confidence: level of ``ci``.
        why: one sentence a person can read.
    """

    verdict: str
    ratio: float
    ci: tuple[float, float]
    p_value: float
    noise_floor: float
    rounds: int
    round_ratios: tuple[float, ...]
    rounds_needed: int | None
    confidence: float
    why: str

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ci"], d["round_ratios"] = list(self.ci), list(self.round_ratios)
        return d


def _bootstrap_median_interval(logs: np.ndarray, confidence: float, n_boot: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    medians = np.median(logs[rng.integers(0, logs.size, size=(n_boot, logs.size))], axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _signed_rank_p(logs: np.ndarray) -> float:
    from scipy.stats import wilcoxon  # noqa: PLC0415  (import-light package)

    if not np.any(logs != 0):
        return 1.0
    p = float(wilcoxon(logs, alternative="two-sided").pvalue)
    return p if math.isfinite(p) else 1.0


def judge_rounds(
    round_ratios: Sequence[float],
    noise_floor: float,
    *,
    confidence: float = 0.95,
    n_boot: int = 10_000,
    seed: int = 0,
) -> RoundVerdict:
    """The verdict of a paired comparison from its per-round ratios (see the module).

    Args:
        round_ratios: ``time(B) / time(A)`` of each round (positive, finite; at least 2).
        noise_floor: the target's floor ``f`` (a fraction >= 0): B is faster only if the
            interval's high end is below ``1 / (1 + f)``, slower only if its low end is above
            ``1 + f``.
        confidence: two-sided level of the interval, in (0, 1).
        n_boot: bootstrap resamples of the rounds.
        seed: RNG seed (the same rounds always give the same verdict).

    Returns:
        :class:`RoundVerdict`.

    Raises:
        ValueError: fewer than 2 rounds, a ratio that is not positive and finite, a negative
            or non-finite floor, or ``confidence`` outside (0, 1).
    """
    r = np.asarray(round_ratios, dtype=np.float64)
    if r.ndim != 1 or r.size < 2:
        raise ValueError(f"judge_rounds: need at least 2 rounds, got {r.size}")
    if not (np.isfinite(r).all() and (r > 0).all()):
        raise ValueError("judge_rounds: every round ratio must be positive and finite")
    if not (math.isfinite(noise_floor) and noise_floor >= 0):
        raise ValueError(f"judge_rounds: noise_floor must be a fraction >= 0, got {noise_floor!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"judge_rounds: confidence must be in (0, 1), got {confidence!r}")
    logs = np.log(r)
    center = float(np.median(logs))
    lo, hi = _bootstrap_median_interval(logs, confidence, n_boot, seed)
    p = _signed_rank_p(logs)
    edge = math.log1p(noise_floor)
    if lo > edge:
        verdict = "a_faster"
    elif hi < -edge:
        verdict = "b_faster"
    else:
        verdict = "tie"
    gap = abs(center) - edge
    facing = center - lo if center > 0 else hi - center  # half-width on the side facing the floor
    if gap <= 0:
        needed = None
    elif verdict == "tie":
        needed = max(r.size + 1, math.ceil(r.size * (facing / gap) ** 2))
    else:
        needed = max(2, min(r.size, math.ceil(r.size * (facing / gap) ** 2)))
    ratio, ci = math.exp(center), (math.exp(lo), math.exp(hi))
    band = f"[{1 / (1 + noise_floor):.4f}, {1 + noise_floor:.4f}]"
    span = f"ratio {ratio:.4f} (CI {ci[0]:.4f}-{ci[1]:.4f}, {r.size} rounds)"
    if verdict == "a_faster":
        why = f"A is faster: B takes {ratio:.3f}x A's time, {span}, the interval above the noise floor band {band}"
    elif verdict == "b_faster":
        why = f"B is faster: {1 / ratio:.3f}x, {span}, the interval below the noise floor band {band}"
    elif needed is None:
        why = (f"tie: {span}; the measured difference lies within the noise floor {noise_floor:.2%} of this host "
               f"({band}): if that is the true difference, no number of rounds resolves it here")
    else:
        why = (f"tie: {span} reaches into the noise floor band {band}; about {needed} rounds would resolve it "
               "if the difference holds")
    return RoundVerdict(verdict=verdict, ratio=ratio, ci=ci, p_value=p, noise_floor=float(noise_floor), rounds=int(r.size),
                        round_ratios=tuple(float(x) for x in r), rounds_needed=needed, confidence=confidence, why=why)
