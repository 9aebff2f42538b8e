"""Benchmark protocol: warm-up, repetitions sized from an estimate, cache flush, raw samples."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BenchSettings:
    """How a candidate is timed.

    Attributes:
        warmup_ms: kernel time (ms) spent on untimed warm-up calls (at least one call).
        rep_ms: target total kernel time (ms) of the timed repetitions.
        min_reps, max_reps: bounds on the number of timed repetitions.
        flush_bytes: size of the buffer written between repetitions to evict caches
            (>= the last-level cache; 0 disables flushing).

    Raises:
        ValueError: negative times or sizes, or ``min_reps > max_reps``.
    """

    warmup_ms: float = 20.0
    rep_ms: float = 150.0
    min_reps: int = 10
    max_reps: int = 200
    flush_bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        if self.warmup_ms < 0 or self.rep_ms < 0 or self.flush_bytes < 0:
            raise ValueError("BenchSettings: warmup_ms, rep_ms and flush_bytes must be >= 0")
        if not 1 <= self.min_reps <= self.max_reps:
            raise ValueError(
                f"BenchSettings: need 1 <= min_reps <= max_reps (got {self.min_reps}, {self.max_reps})"
            )

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# OpenMP settings of the sandbox child (see omp_environment). Chosen by measurement on a
# 2-core x86_64 host with and without a competing busy process; see OMP_CHOICE_NOTE.
OMP_DEFAULTS: dict[str, str] = {}
OMP_CHOICE_NOTE = ""
_OMP_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES")


def omp_environment() -> dict[str, str]:
    """OpenMP environment variables for timed candidate runs (recorded in the fingerprint).

    :data:`OMP_DEFAULTS`, each overridable by ``KERNELS_<NAME>`` (e.g.
    ``KERNELS_OMP_WAIT_POLICY=ACTIVE``; an empty value removes the setting).
    """
    import os  # noqa: PLC0415

    env = dict(OMP_DEFAULTS)
    for name in _OMP_KNOBS:
        raw = os.environ.get(f"KERNELS_{name}")
        if raw is not None:
            if raw.strip():
                env[name] = raw.strip()
            else:
                env.pop(name, None)
    return env


def make_flush(nbytes: int) -> Callable[[], None] | None:
    """A function that writes ``nbytes`` of fresh values (evicting caches), or None for 0."""
    if nbytes <= 0:
        return None
    buf = np.empty(nbytes, dtype=np.uint8)
    counter = [0]

    def flush() -> None:
        counter[0] = (counter[0] + 1) & 0xFF
        buf.fill(counter[0])  # a different value each time: nothing can skip the write

    return flush


def bench(
    fn: Callable[[], object],
    settings: BenchSettings,
    *,
    prepare: Callable[[], None] | None = None,
    flush: Callable[[], None] | None = None,
) -> list[float]:
    """Time ``fn`` and return the raw samples in ms (one per timed call).

    ``prepare`` runs untimed before every call (e.g. NaN-fill outputs, rotate inputs);
    ``flush`` runs untimed before every timed call only. Warm-up calls until ``warmup_ms``
    of kernel time (at least 3, at most ``max_reps`` calls) estimate the steady-state per-call
    time from their second half, which sizes the timed repetitions to about ``rep_ms`` within ``[min_reps, max_reps]``.
    """
    clock = time.perf_counter_ns
    warm: list[int] = []
    spent_ns = 0
    # At least 3 warm-up calls: the first ones pay for thread-team start-up and page faults.
    while len(warm) < 3 or (spent_ns < settings.warmup_ms * 1e6 and len(warm) < settings.max_reps):
        if prepare is not None:
            prepare()
        t0 = clock()
        fn()
        warm.append(clock() - t0)
        spent_ns += warm[-1]
    est_ms = max(min(warm[len(warm) // 2 :]) / 1e6, 1e-6)  # later calls: steady state
    reps = min(max(math.ceil(settings.rep_ms / est_ms), settings.min_reps), settings.max_reps)
    samples = []
    for _ in range(reps):
        if prepare is not None:
            prepare()
        if flush is not None:
            flush()
        t0 = clock()
        fn()
        samples.append((clock() - t0) / 1e6)
    return samples
