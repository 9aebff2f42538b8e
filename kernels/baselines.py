"""Trusted in-process baselines to compare candidates against (same bench protocol)."""

from __future__ import annotations

import numpy as np

from kernels import stats
from kernels import timing
from kernels.timing import BenchSettings
from kernels.workloads import get_workload

_BASE_SEED = 12345


def numpy_rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Plain NumPy float32 RMSNorm: ``x`` [rows, hidden], ``w`` [hidden] -> [rows, hidden]."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w


def numpy_rmsnorm_latency_ms(shape_set: str = "llama3-8b", bench: BenchSettings | None = None) -> float:
    """Latency (ms) of :func:`numpy_rmsnorm`: the sum over ``shape_set`` of per-shape
    median latencies, timed like candidates (warm-up, cache flush, two rotating input sets),
    so it compares directly with ``Evidence.metrics["latency_ms"]``.

    Raises:
        KeyError: unknown shape set.
    """
    settings = bench or BenchSettings()
    wl = get_workload("rmsnorm")
    eps = float(wl.attrs["eps"])
    flush = timing.make_flush(settings.flush_bytes)
    total = 0.0
    for i, shape in enumerate(wl.shapes(shape_set)):
        sets = [wl.generate(shape, _BASE_SEED + 2 * i + j) for j in range(2)]
        cur = [0]

        def prepare() -> None:
            cur[0] = (cur[0] + 1) % len(sets)

        def call() -> None:
            numpy_rmsnorm(sets[cur[0]]["x"], sets[cur[0]]["w"], eps)

        total += stats.summarize(timing.bench(call, settings, prepare=prepare, flush=flush))["median"]
    return total
