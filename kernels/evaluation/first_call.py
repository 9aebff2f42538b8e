"""First-call cost: a candidate's first call on each shape, apart from its steady state.

The timing child is a fresh process per evaluation; the timing loop discards its warm-up
calls, so a kernel that builds a table or allocates on first use looks as fast as one
without set-up. The child reports each timed shape's first call in the process (CPU: the
first warm-up call, after the trusted code has started the OpenMP thread team, with the
calling thread's CPU time during it; CUDA: the shape's first validation call, device time),
and this module turns those into metrics and a flag. The ranking metric stays
``latency_ms`` (steady state).

Metrics (:func:`first_call_metrics`), all ms or plain ratios:
  ``first_call_ms[<label>]``     the shape's first call in the child process (ms)
  ``first_call_ratio[<label>]``  that call over the shape's steady median ``latency_ms[<label>]``
  ``first_call_cpu_ms[<label>]`` CPU time of the calling thread during that call (ms; CPU only)
  ``first_call_ms``              the process's first call of the candidate: the first timed
                                 shape's (cold: library just loaded, caches and pages cold)
  ``first_call_ratio``           ``first_call_ms`` over the same shape's steady median
  ``first_call_flag``            1.0 when some shape's first call is set-up cost
                                 (:func:`is_set_up_cost`), else 0.0

The excess floor keeps cold caches out of the flag: a fresh process's first call of a plain
kernel costs tens of microseconds more than its steady state (cold instruction and data
caches, TLB; measurements in ``docs/evaluation.md``), which is over 10x for a kernel of a
few microseconds. The first call is one sample: on a loaded host a preemption during it
(the calling thread, or an OpenMP worker the call waits for) costs milliseconds of wall
time. Where the CPU time is known the flag also needs it over the same bounds: set-up work
runs on the calling thread (a worker's share of set-up in a parallel region raises its
share alike), waiting for a CPU or sleeping at a passive barrier does not count. The CPU
time has a floor of its own (:data:`FLAG_MIN_CPU_EXCESS_MS`): on a busy host a cold call is
charged cache and TLB refills and page faults. Set-up that sleeps instead of computing, that
only worker threads do, or that costs under a millisecond is missed there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

FLAG_RATIO = 10.0  # first call over steady median above which a candidate is flagged
FLAG_MIN_EXCESS_MS = 0.1  # and by at least this much (ms) over its steady median
# The calling thread's CPU time must exceed its steady median by this much (ms) too: a cold
# first call on a busy host is charged page faults, TLB and cache refills that other processes
# keep evicting (0.02-0.07 ms measured under three competing busy loops, over 0.15 ms seen on a
# CI host), while set-up worth flagging (a table, a large allocation) costs milliseconds.
FLAG_MIN_CPU_EXCESS_MS = 1.0


def _beyond(ms: float, steady_ms: float, floor_ms: float = FLAG_MIN_EXCESS_MS) -> bool:
    return ms > FLAG_RATIO * steady_ms and ms - steady_ms > floor_ms


def is_set_up_cost(first_ms: float, steady_ms: float, cpu_ms: float | None = None) -> bool:
    """Whether a first call of ``first_ms`` (ms, wall or device time) against a steady median
    of ``steady_ms`` (ms) is flagged: over :data:`FLAG_RATIO` times it and over
    :data:`FLAG_MIN_EXCESS_MS` above it; where ``cpu_ms`` (the calling thread's CPU time
    during the call, ms) is given, it too, by :data:`FLAG_MIN_CPU_EXCESS_MS` (the wall time
    alone may be a preemption, a little CPU time a cold cache on a busy host)."""
    if not steady_ms > 0 or not _beyond(first_ms, steady_ms):
        return False
    return cpu_ms is None or _beyond(cpu_ms, steady_ms, FLAG_MIN_CPU_EXCESS_MS)


def first_call_metrics(shapes: Iterable[tuple]) -> dict[str, float]:
    """The first-call metrics of a timed shape set (see the module docstring).

    Args:
        shapes: per timed shape in timing order, ``(label, first call ms or None where the
            child reported none, steady median ms[, the first call's thread CPU ms or None])``.

    Returns:
        ``{metric: value}``; empty when no shape has a first call. Ratios only where the
        median is positive.
    """
    metrics: dict[str, float] = {}
    flagged = False
    first_label = None
    for label, first, median, *rest in shapes:
        if first is None or not math.isfinite(first):
            continue
        cpu = rest[0] if rest and rest[0] is not None and math.isfinite(rest[0]) else None
        first_label = first_label or label
        metrics[f"first_call_ms[{label}]"] = float(first)
        if cpu is not None:
            metrics[f"first_call_cpu_ms[{label}]"] = float(cpu)
        if median > 0:
            metrics[f"first_call_ratio[{label}]"] = float(first) / median
            flagged |= is_set_up_cost(first, median, cpu)
    if first_label is None:
        return metrics
    metrics["first_call_ms"] = metrics[f"first_call_ms[{first_label}]"]
    if f"first_call_ratio[{first_label}]" in metrics:
        metrics["first_call_ratio"] = metrics[f"first_call_ratio[{first_label}]"]
    metrics["first_call_flag"] = 1.0 if flagged else 0.0
    return metrics


def first_call_note(metrics: Mapping[str, object]) -> str:
    """What the flag says, e.g. ``"first call 250x its steady state: set-up cost on first use
    (rows=8,hidden=256: 5.1 ms first, 0.02 ms steady)"``, naming the flagged shape with the
    highest ratio; ``""`` when ``metrics["first_call_flag"]`` is not set."""
    if not metrics.get("first_call_flag"):
        return ""

    def num(key: str) -> float | None:
        v = metrics.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    flagged = {}
    for key in metrics:
        if key.startswith("first_call_ms[") and key.endswith("]"):
            label = key[len("first_call_ms["):-1]
            first, steady, ratio = num(key), num(f"latency_ms[{label}]"), num(f"first_call_ratio[{label}]")
            if steady is None and first is not None and ratio:  # the steady median the ratio came from
                steady = first / ratio
            if first is not None and steady and is_set_up_cost(first, steady, num(f"first_call_cpu_ms[{label}]")):
                flagged[label] = (first / steady, first, steady)
    if not flagged:
        return "first call far above its steady state: set-up cost on first use"
    label = max(flagged, key=lambda k: flagged[k][0])
    ratio, first, steady = flagged[label]
    return (f"first call {ratio:.0f}x its steady state: set-up cost on first use "
            f"({label}: {first:.3g} ms first, {steady:.3g} ms steady)")
