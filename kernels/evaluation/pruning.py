"""Stopping a hopeless candidate's timing early: the prune rule and its limits.

A candidate whose first calls show it more than ``factor`` times slower than the incumbent
(the best candidate so far) on the same shape is not worth its full timing. Like Optuna's
pruners (a trial is stopped once its intermediate values are clearly worse) and Kernel
Tuner's time limits (a configuration is stopped once it runs past a bound derived from the
best time so far), the timing ends early with the outcome ``pruned`` and the calls measured
so far as partial evidence.

Two mechanisms, one rule each:

- per shape, in the timing child (:func:`kernels.evaluation.timing.bench_run`): after each warm-up call
  from the second one, :func:`verdict` on the warm-up calls; after each timed call from the
  :data:`PRUNE_AFTER_CALLS`-th, :func:`verdict` on the timed calls. The child stops at the
  first call the rule holds for and reports the calls it made; the parent applies the same
  rule to the reported calls and accepts the prune only when it holds (a candidate cannot
  have itself pruned without the calls that show it);
- for the whole timing child, in the parent: a wall-clock bound of ``factor`` times the
  incumbent's timing child wall time plus :attr:`Prune.slack_s` (:meth:`Prune.deadline_s`),
  measured by the parent, which the candidate cannot influence. A candidate whose calls are
  all at most ``factor`` times the incumbent's takes at most about ``factor`` times its
  timing (warm-up and repetitions are sized in kernel time, :class:`kernels.evaluation.timing.BenchSettings`),
  so the bound stops only candidates the rule would stop.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Timed calls of a shape before the rule is applied to them (their median).
PRUNE_AFTER_CALLS = 3
#: Default prune factor ``k`` of a goal.
DEFAULT_FACTOR = 3.0
#: Calls faster than this (ms) are never pruned: their whole timing costs about
#: ``BenchSettings.rep_ms`` whatever their speed, and at microseconds a call's time is as much
#: the host's noise (scheduling, OpenMP wake-ups) as the kernel's.
MIN_LIMIT_MS = 1.0


@dataclass(frozen=True)
class Prune:
    """When to stop a candidate's timing early.

    Attributes:
        factor: ``k`` > 1: a candidate more than ``k`` times slower than the incumbent is pruned.
        shape_ms: the incumbent's median latency (ms) per shape label
            (``Evidence.metrics["latency_ms[<label>]"]``); shapes without one are never pruned
            by the per-shape rule.
        timing_wall_s: the incumbent's timing child wall-clock seconds
            (``Evidence.fingerprint["child_wall_s"]["timing"]``), or None (no wall-clock bound).
        slack_s: seconds added to the wall-clock bound (process start, input loading,
            the eviction of caches between calls, which do not scale with the kernel, and
            other processes competing for a loaded host's cores).
        min_limit_ms: the per-shape limit is never below this (:data:`MIN_LIMIT_MS`).
        incumbent: what the incumbent is, for the log (e.g. ``{"candidate": 12}``).

    Raises:
        ValueError: ``factor`` not a finite number > 1, a non-positive or non-finite
            latency, or a negative wall time or slack.
    """

    factor: float
    shape_ms: Mapping[str, float] = field(default_factory=dict)
    timing_wall_s: float | None = None
    slack_s: float = 10.0
    incumbent: Mapping[str, Any] = field(default_factory=dict)
    min_limit_ms: float = MIN_LIMIT_MS

    def __post_init__(self) -> None:
        if isinstance(self.factor, bool) or not isinstance(self.factor, (int, float)) or not (
                math.isfinite(self.factor) and self.factor > 1):
            raise ValueError(f"Prune: factor must be a finite number > 1, not {self.factor!r}")
        for label, ms in self.shape_ms.items():
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not (math.isfinite(ms) and ms > 0):
                raise ValueError(f"Prune: the incumbent's latency at {label} must be a positive number of ms, not {ms!r}")
        for name in ("timing_wall_s", "slack_s", "min_limit_ms"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not (math.isfinite(v) and v >= 0)):
                raise ValueError(f"Prune: {name} must be a non-negative number, not {v!r}")

    def limit_ms(self, label: str) -> float | None:
        """``factor`` times the incumbent's median at ``label`` (ms), at least
        ``min_limit_ms``; None where the incumbent has no median there."""
        ms = self.shape_ms.get(label)
        return None if ms is None else max(self.factor * float(ms), self.min_limit_ms)

    def deadline_s(self) -> float | None:
        """Wall-clock seconds the timing child may run: ``factor * timing_wall_s + slack_s``,
        or None without the incumbent's wall time."""
        if self.timing_wall_s is None:
            return None
        return self.factor * float(self.timing_wall_s) + self.slack_s

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "shape_ms": dict(self.shape_ms), "timing_wall_s": self.timing_wall_s,
                "slack_s": self.slack_s, "incumbent": dict(self.incumbent), "min_limit_ms": self.min_limit_ms}


def verdict(warm_ms: Sequence[float], samples_ms: Sequence[float], limit_ms: float | None) -> str | None:
    """Why these calls show the candidate slower than ``limit_ms``, or None.

    With at least :data:`PRUNE_AFTER_CALLS` timed calls, their median decides; before any
    timed call, the fastest warm-up call after the first (which carries set-up cost) does,
    once there are two. Fewer calls decide nothing.

    Args:
        warm_ms: the warm-up calls (ms), in call order.
        samples_ms: the timed calls (ms), in call order.
        limit_ms: ``k`` times the incumbent's median on the same shape (ms), or None.
    """
    if limit_ms is None:
        return None
    if len(samples_ms) >= PRUNE_AFTER_CALLS:
        median = statistics.median(samples_ms)
        if median > limit_ms:
            return f"median of {len(samples_ms)} timed calls {median:.4g} ms > limit {limit_ms:.4g} ms"
        return None
    if not samples_ms and len(warm_ms) >= 2:
        fastest = min(warm_ms[1:])
        if fastest > limit_ms:
            return (f"fastest of {len(warm_ms) - 1} warm-up calls after the first {fastest:.4g} ms "
                    f"> limit {limit_ms:.4g} ms")
    return None


def _calls(v: Any) -> list[float]:
    if not isinstance(v, list) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0 for x in v):
        raise ValueError("the calls are not a list of non-negative numbers of ms")
    return [float(x) for x in v]


def judge_report(result: Mapping[str, Any], labels: Mapping[str, str], prune: Prune) -> tuple[str, dict, dict]:
    """Check a timing child's prune report against the rule and return the partial evidence.

    Args:
        result: the child's result (``{"pruned": {"item", "why"}, "timed": {id: {"samples_ms",
            "warm_ms"}}}``, :mod:`kernels.sandbox.child`).
        labels: shape label of every timed item id of the request.
        prune: the limits the request was given.

    Returns:
        ``(reason, metrics, samples_ms)``: ``metrics`` holds ``latency_ms[<label>]`` (median of
        the timed calls) of every shape with timed calls, ``prune_observed_ms`` (the pruned
        shape's deciding time: its timed calls' median, or its fastest warm-up call after the
        first), ``prune_ratio`` (that over the incumbent's median there) and
        ``prune_limit_ms``; no whole-set ``latency_ms`` (not every shape was timed).
        ``samples_ms``: the timed calls per shape.

    Raises:
        ValueError: the report is malformed, names an item the request did not time, or its
            calls do not show the candidate slower than the limit (the rule does not hold).
    """
    report, timed = result.get("pruned"), result.get("timed")
    if not isinstance(report, dict) or not isinstance(timed, dict):
        raise ValueError("the prune report is malformed")
    item = report.get("item")
    if item not in labels or item not in timed or not set(timed) <= set(labels):
        raise ValueError(f"the prune report names a shape that was not timed: {item!r}")
    samples: dict[str, list[float]] = {}
    metrics: dict[str, float] = {}
    for tid, entry in timed.items():
        if not isinstance(entry, dict):
            raise ValueError(f"the calls of {labels[tid]} are malformed")
        s = _calls(entry.get("samples_ms"))
        if s:
            samples[labels[tid]] = s
            metrics[f"latency_ms[{labels[tid]}]"] = statistics.median(s)
    label = labels[item]
    warm, s = _calls(timed[item].get("warm_ms")), samples.get(label, [])
    limit = prune.limit_ms(label)
    why = verdict(warm, s, limit)
    if why is None:
        raise ValueError(f"the calls reported at {label} do not show it slower than the limit "
                         f"({'none' if limit is None else f'{limit:.4g} ms'})")
    observed = statistics.median(s) if s else min(warm[1:])
    metrics["prune_ratio"] = observed / float(prune.shape_ms[label])
    metrics["prune_limit_ms"] = float(limit)
    metrics["prune_observed_ms"] = observed
    return (f"pruned at {label}: {why}, more than {prune.factor:g} x the incumbent's "
            f"{float(prune.shape_ms[label]):.4g} ms ({observed / float(prune.shape_ms[label]):.1f} x); "
            f"warm-up calls {', '.join(f'{w:.4g}' for w in warm)} ms"), metrics, samples
