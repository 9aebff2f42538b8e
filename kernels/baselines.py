"""Trusted in-process baselines to compare candidates against (same bench protocol).

Two kinds, both timed like candidates (warm-up, cache flush before every timed call: the
call's own arrays evicted, as for candidates; two rotating input sets) and summed over a shape set as the sum of per-shape medians, so they
compare directly with ``Evidence.metrics["latency_ms"]``:

- :func:`baseline_latency_ms`: the workload in plain NumPy float32 (what a user would write
  without a kernel; ``numpy.matmul`` uses the BLAS NumPy ships with, on its default threads),
  the ``numpy_baseline`` of the workload's folder (``kernels/workloads/<workload>/``);
- :func:`copy_latency_ms`: ``numpy.copyto`` moving the workload's compulsory bytes
  (``Workload.bytes``): half read, half written. The practical bandwidth limit of a
  memory-bound kernel on this host.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import numpy as np

from kernels import stats
from kernels.backends.cpu import CompileError
from kernels.evaluation import timing
from kernels.evaluation.timing import BenchSettings
from kernels.workloads import WORKLOADS, get_workload
from kernels.workloads.fused_add_rmsnorm import numpy_fused_add_rmsnorm
from kernels.workloads.gemm import numpy_gemm
from kernels.workloads.kda import numpy_kda
from kernels.workloads.rmsnorm import numpy_rmsnorm
from kernels.workloads.softmax import numpy_softmax

__all__ = [
    "NUMPY_BASELINES",
    "baseline_latency_ms",
    "copy_latency_ms",
    "numpy_fused_add_rmsnorm",
    "numpy_gemm",
    "numpy_kda",
    "numpy_rmsnorm",
    "numpy_rmsnorm_latency_ms",
    "numpy_softmax",
]

_BASE_SEED = 12345


#: Workload name -> ``fn(inputs, attrs, out)`` running its NumPy baseline once
#: (:attr:`kernels.workloads.base.Workload.numpy_baseline`); ``out`` is a per-input-set dict
#: the function may use for preallocated outputs.
NUMPY_BASELINES: Mapping[str, Callable[[dict, Mapping[str, float], dict], object]] = {
    name: wl.numpy_baseline for name, wl in WORKLOADS.items() if wl.numpy_baseline is not None
}


@functools.cache
def _evictor() -> timing.Evictor | None:
    """The cache-eviction helper compiled for this host, or None where it cannot be."""
    try:
        return timing.Evictor(timing.evict_library())
    except (CompileError, OSError, RuntimeError):
        return None


def time_shape_set(workload: str, shape_set: str, bench: BenchSettings | None,
                   make_call: Callable[[dict, int], tuple[Callable[[], object], list[np.ndarray]]]) -> float:
    """Sum over ``shape_set`` of per-shape median latencies (ms), timed with the candidates'
    protocol (``bench``, default :class:`BenchSettings`); ``make_call(shape, seed)`` returns
    the call and the arrays it touches (evicted before every timed call, as for candidates).
    Two input sets per shape alternate, as the candidates' rotation sets do.

    Raises:
        KeyError: unknown workload or shape set.
    """
    settings = bench or BenchSettings()
    wl = get_workload(workload)
    shapes = wl.shapes(shape_set)
    evictor = _evictor() if settings.flush == "evict" else None
    rewrite = timing.make_flush(settings.flush_bytes) if settings.flush != "none" and evictor is None else None
    total = 0.0
    for i, shape in enumerate(shapes):
        made = [make_call(dict(shape), _BASE_SEED + 2 * i + j) for j in range(2)]
        calls = [c for c, _ in made]
        plans = [evictor.plan(arrays) for _, arrays in made] if evictor else []
        cur = [0]

        def prepare() -> None:
            cur[0] = (cur[0] + 1) % len(calls)

        def call() -> None:
            calls[cur[0]]()

        def evict() -> None:
            plans[cur[0]]()

        samples = timing.bench(call, settings, prepare=prepare, flush=evict if plans else rewrite)
        total += stats.summarize(samples)["median"]
    return total


def baseline_latency_ms(workload: str, shape_set: str, bench: BenchSettings | None = None) -> float:
    """Latency (ms) of the workload's plain NumPy float32 implementation
    (:attr:`~kernels.workloads.base.Workload.numpy_baseline`) on ``shape_set``: the sum of per-shape median latencies.

    Attributes (e.g. ``eps``) are those in force for ``shape_set``.

    Raises:
        KeyError: unknown workload or shape set, or no NumPy baseline for the workload.
    """
    wl = get_workload(workload)
    fn = wl.numpy_baseline
    if fn is None:
        known = sorted(name for name, w in WORKLOADS.items() if w.numpy_baseline is not None)
        raise KeyError(f"no NumPy baseline for '{workload}' (known: {', '.join(known)})")
    attrs = wl.attrs_for(shape_set)

    def make_call(shape: dict, seed: int):
        inputs, out = wl.generate(shape, seed), {}
        fn(inputs, attrs, out)  # allocates preallocated outputs, so they are evicted too
        return (lambda: fn(inputs, attrs, out)), [*inputs.values(), *out.values()]

    return time_shape_set(workload, shape_set, bench, make_call)


def copy_latency_ms(workload: str, shape_set: str, bench: BenchSettings | None = None) -> float:
    """Latency (ms) of ``numpy.copyto`` moving each shape's compulsory traffic
    (``Workload.bytes(shape)``: ``bytes / 2`` read, ``bytes / 2`` written), summed over
    ``shape_set`` like candidates. ``Workload.bytes`` summed over the set divided by this
    latency is the copy bandwidth a memory-bound kernel can approach.

    Raises:
        KeyError: unknown workload or shape set.
    """
    wl = get_workload(workload)

    def make_call(shape: dict, seed: int):
        n = max(1, int(wl.bytes(shape) // 8))  # float32 elements per side
        src = np.random.default_rng(seed).random(n, dtype=np.float32)
        dst = np.empty_like(src)
        return (lambda: np.copyto(dst, src)), [src, dst]

    return time_shape_set(workload, shape_set, bench, make_call)


def numpy_rmsnorm_latency_ms(shape_set: str = "llama3-8b", bench: BenchSettings | None = None) -> float:
    """Latency (ms) of :func:`numpy_rmsnorm` on ``shape_set`` (see :func:`baseline_latency_ms`).

    Raises:
        KeyError: unknown shape set.
    """
    return baseline_latency_ms("rmsnorm", shape_set, bench)
