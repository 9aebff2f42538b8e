"""Helpers shared by the workloads: row-normalised errors (all but kda), LLM-like
activations (the inference-engine workloads) and the launch plan of the row-wise CUDA
templates (rmsnorm, fused_add_rmsnorm, softmax)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from kernels.workloads.base import Arrays


def axes_2d(name: str, a: str, b: str) -> Callable[[Mapping[str, np.ndarray]], dict[str, int]]:
    """A ``shape_of`` (:class:`~kernels.workloads.base.Workload`) reading axes ``a`` and
    ``b`` from the two dimensions of input ``name``."""
    return lambda i: {a: int(i[name].shape[0]), b: int(i[name].shape[1])}


_SQRT1_2 = np.float32(0.7071067811865476)


def gelu_(x: np.ndarray) -> np.ndarray:
    """Exact GELU of float32 ``x`` in place: ``0.5 x (1 + erf(x / sqrt 2))`` (scipy's erf)."""
    from scipy.special import erf  # noqa: PLC0415 - scipy is imported on first use only

    t = x * _SQRT1_2
    erf(t, out=t)
    t += np.float32(1.0)
    x *= t
    x *= np.float32(0.5)
    return x


def softmax_rows_(sc: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of float32 ``sc`` in place (max subtracted first)."""
    sc -= sc.max(axis=-1, keepdims=True)
    np.exp(sc, out=sc)
    sc /= sc.sum(axis=-1, keepdims=True)
    return sc


#: Largest row cache (bytes of dynamic shared memory) of the row-wise CUDA templates
#: (``SMEM_CACHE_MAX`` in rmsnorm's, fused_add_rmsnorm's and softmax's template.cu).
SMEM_CACHE_MAX = 200 * 1024


def rows_launch_plan(kernel: str, rows_axis: str, row_len_axis: str, args: list[str]) -> dict[str, Any]:
    """Launch plan (JSON dict) of a row-wise CUDA template: ``BLOCK_SIZE // THREADS_PER_ROW``
    rows per block of ``BLOCK_SIZE`` threads, and with ``USE_SMEM`` a cache of those rows in
    dynamic shared memory when it fits :data:`SMEM_CACHE_MAX` (as the kernel decides)."""
    rpb = "(BLOCK_SIZE // THREADS_PER_ROW)"
    row_bytes = f"{rpb} * {row_len_axis} * 4"
    return {
        "launches": [{
            "kernel": kernel,
            "grid": [f"({rows_axis} + {rpb} - 1) // {rpb}"],
            "block": ["BLOCK_SIZE"],
            "shared_mem_bytes": f"USE_SMEM * {row_bytes} * ({row_bytes} <= {SMEM_CACHE_MAX})",
            "args": args,
        }]
    }


# Denominator floor of the row-normalised error: an all-zero reference row cannot blow it up.
REL_FLOOR = 1e-12


def row_errors(out: np.ndarray, ref: np.ndarray, floor: float = REL_FLOOR) -> tuple[float, float]:
    """``(max_abs_error, max_rel_error)`` where the relative error of an element is its
    absolute error over the largest ``|ref|`` of its row (last axis): robust to outputs near
    zero, strict about every element of a row that matters. Empty arrays give ``(0, 0)``; NaN
    in ``out`` gives NaN. One float64 temporary and in-place passes: this runs on every
    validated output of every evaluation."""
    if out.size == 0:
        return 0.0, 0.0
    diff = np.subtract(out, ref, dtype=np.float64)  # float32 widened on the fly, no copy first
    np.abs(diff, out=diff)
    worst = diff.max(axis=-1)  # per row
    scale = np.maximum(np.maximum(ref.max(axis=-1), -ref.min(axis=-1)), floor)  # max |ref| per row
    return float(worst.max()), float((worst / scale).max())


def batched_salted_reference(reference: Callable[[Arrays, Mapping[str, float]], Arrays]):
    """A ``salted_reference`` (:class:`~kernels.workloads.base.Workload`) for a workload whose
    inputs and outputs share a leading batch axis, each batch entry computed from the same
    entry of the inputs alone (softmax rows, KDA batch-heads): only the entries a swap
    touches (flat index // elements per entry, for both indices of every swap) are computed
    again, by ``reference`` on one-entry slices; the rest is copied from the reference before
    the swaps. Falls back to the whole ``reference`` when the leading axes differ."""

    def salted(inputs: Arrays, ref: Arrays, swaps: Mapping[str, list[int]], attrs: Mapping[str, float]) -> Arrays:
        leads = {a.shape[0] if a.ndim else None for a in (*inputs.values(), *ref.values())}
        if len(leads) != 1 or None in leads or not next(iter(leads)):
            return reference(inputs, attrs)
        n = next(iter(leads))
        touched = sorted({int(i) // (inputs[name].size // n) for name, pair in swaps.items() for i in pair})
        out = {k: np.array(v, dtype=np.float64, copy=True) for k, v in ref.items()}
        for b in touched:
            part = reference({k: v[b : b + 1] for k, v in inputs.items()}, attrs)
            for k in out:
                out[k][b] = part[k][0]
        return out

    return salted


def row_error_definition(tolerance: float, row: str = "row (last axis)") -> str:
    return (
        "max_abs_error = max |out - ref|; max_rel_error = max over rows of max_j |out - ref| / "
        f"max_j |ref| with one {row} per row (error relative to the row's largest output, robust to "
        f"outputs near zero); the worst output counts; pass iff max_rel_error <= {tolerance:g}"
    )


def activations(rng: np.random.Generator, rows: int, cols: int, *, outlier_channels: bool = True) -> np.ndarray:
    """float32 [rows, cols]: N(0, 1) times a log-normal per-row scale, plus (optionally) a
    few fixed outlier channels of magnitude 10-60 with a fixed sign (Dettmers et al. 2022,
    arXiv:2208.07339; about 1 in 1000 channels, at least one)."""
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x *= np.exp(rng.normal(0.0, 0.3, size=(rows, 1))).astype(np.float32)
    if outlier_channels and cols:
        n = max(1, cols // 1000)
        ch = rng.choice(cols, size=n, replace=False)
        x[:, ch] = (rng.uniform(10.0, 60.0, size=(rows, n)) * rng.choice([-1.0, 1.0], size=n)).astype(np.float32)
    return x


def f32(**arrays: np.ndarray) -> Arrays:
    """The arrays as float32 C-contiguous (inputs as the evaluator hands them to kernels)."""
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()}


def erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64 (scipy.special.erf; math.erf vectorised when scipy is missing)."""
    try:
        from scipy.special import erf  # noqa: PLC0415
    except ImportError:  # pragma: no cover - scipy is a dependency of the project
        import math  # noqa: PLC0415

        return np.vectorize(math.erf, otypes=[np.float64])(x)
    return erf(x)


def gelu64(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU in float64: ``0.5 x (1 + erf(x / sqrt(2)))`` (Hendrycks & Gimpel 2016,
    arXiv:1606.08415; BERT's and MiniLM's ``hidden_act = "gelu"``)."""
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + erf64(x / np.sqrt(2.0)))
