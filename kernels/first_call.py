"""First-call cost: a candidate's first call on each shape, apart from its steady state.

The timing child is a fresh process per evaluation; the timing loop discards its warm-up
calls, so a kernel that builds a table or allocates on first use looks as fast as one
without set-up. The child reports each timed shape's first call in the process (CPU: the
first warm-up call, after the trusted code has started the OpenMP thread team; CUDA: the
shape's first validation call, device time), and this module turns those into metrics and
a flag. The ranking metric stays ``latency_ms`` (steady state).

Metrics (:func:`first_call_metrics`), all ms or plain ratios:
  ``first_call_ms[<label>]``     the shape's first call in the child process (ms)
  ``first_call_ratio[<label>]``  that call over the shape's steady median ``latency_ms[<label>]``
  ``first_call_ms``              the process's first call of the candidate: the first timed
                                 shape's (cold: library just loaded, caches and pages cold)
  ``first_call_ratio``           ``first_call_ms`` over the same shape's steady median
  ``first_call_flag``            1.0 when some shape's first call costs more than
                                 :data:`FLAG_RATIO` times its steady median and more than
                                 :data:`FLAG_MIN_EXCESS_MS` above it, else 0.0

The excess floor keeps cold caches out of the flag: a fresh process's first call of a plain
kernel costs tens of microseconds more than its steady state (cold instruction and data
caches, TLB; measurements in ``docs/evaluation.md``), which is over 10x for a kernel of a
few microseconds. The first call is one sample: a preemption during it shows as set-up
cost, so the flag is evidence to look at, not a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

FLAG_RATIO = 10.0  # first call over steady median above which a candidate is flagged
FLAG_MIN_EXCESS_MS = 0.1  # and by at least this much (ms) over its steady median


def is_set_up_cost(first_ms: float, steady_ms: float) -> bool:
    """Whether a first call of ``first_ms`` (ms) against a steady median of ``steady_ms`` (ms)
    is flagged: over :data:`FLAG_RATIO` times it and over :data:`FLAG_MIN_EXCESS_MS` above it."""
    return steady_ms > 0 and first_ms > FLAG_RATIO * steady_ms and first_ms - steady_ms > FLAG_MIN_EXCESS_MS


def first_call_metrics(shapes: Iterable[tuple[str, float | None, float]]) -> dict[str, float]:
    """The first-call metrics of a timed shape set (see the module docstring).

    Args:
        shapes: per timed shape in timing order, ``(label, first call ms or None where the
            child reported none, steady median ms)``.

    Returns:
        ``{metric: value}``; empty when no shape has a first call. Ratios only where the
        median is positive.
    """
    metrics: dict[str, float] = {}
    flagged = False
    first_label = None
    for label, first, median in shapes:
        if first is None or not math.isfinite(first):
            continue
        first_label = first_label or label
        metrics[f"first_call_ms[{label}]"] = float(first)
        if median > 0:
            metrics[f"first_call_ratio[{label}]"] = float(first) / median
            flagged |= is_set_up_cost(first, median)
    if first_label is None:
        return metrics
    metrics["first_call_ms"] = metrics[f"first_call_ms[{first_label}]"]
    if f"first_call_ratio[{first_label}]" in metrics:
        metrics["first_call_ratio"] = metrics[f"first_call_ratio[{first_label}]"]
    metrics["first_call_flag"] = 1.0 if flagged else 0.0
    return metrics


def first_call_note(metrics: Mapping[str, object]) -> str:
    """What the flag says, e.g. ``"first call 250x its steady state: set-up cost on first use
    (rows=8,hidden=256: 5.1 ms first, 0.02 ms steady)"``, naming the shape with the highest
    ratio; ``""`` when ``metrics["first_call_flag"]`` is not set."""
    if not metrics.get("first_call_flag"):
        return ""
    ratios = {k[len("first_call_ratio["):-1]: v for k, v in metrics.items()
              if k.startswith("first_call_ratio[") and isinstance(v, (int, float))}
    if not ratios:
        return "first call far above its steady state: set-up cost on first use"
    label = max(ratios, key=ratios.get)
    first, steady = metrics.get(f"first_call_ms[{label}]"), metrics.get(f"latency_ms[{label}]")
    detail = (f" ({label}: {first:.3g} ms first, {steady:.3g} ms steady)"
              if isinstance(first, (int, float)) and isinstance(steady, (int, float)) else f" ({label})")
    return f"first call {ratios[label]:.0f}x its steady state: set-up cost on first use{detail}"
