"""Fused residual add + RMSNorm, float32.

    residual_out = x + residual
    y = residual_out / sqrt(mean(residual_out**2, axis=-1) + eps) * w

per row. Inputs ``x`` [rows, hidden] (the sub-layer's output), ``residual`` [rows, hidden]
(the residual stream) and ``w`` [hidden]; outputs ``y`` [rows, hidden] (input of the next
sub-layer) and ``residual_out`` [rows, hidden] (the updated residual stream); all float32.
The math is FlashInfer Trace's ``definitions/rmsnorm/fused_add_rmsnorm_h4096.json``
(``flashinfer.norm.fused_add_rmsnorm``: sum in float32, ``rsqrt(mean(x^2) + eps)``, times
the weight); FlashInfer updates its arguments in place, here inputs are read-only and both
results are separate outputs. Reference in float64.

``eps`` is a model constant, set per shape set: Llama-3-8B (hidden 4096) uses 1e-5,
DeepSeek-V3 and Kimi K2 (hidden 7168) use 1e-6 (``rms_norm_eps`` in their ``config.json``).
Rows are decode/prefill batch sizes seen in FlashInfer Trace's
``workloads/rmsnorm/fused_add_rmsnorm_h4096.jsonl`` (1, 7, 15, 16, 34, 63, 64, 79, 170, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import axes_2d, rows_launch_plan
from kernels.workloads.base import Arg, Arrays, Shape, Workload
from kernels.workloads.rmsnorm import CUDA_SPACE as _RMSNORM_CUDA_SPACE
from kernels.workloads.rmsnorm import ERROR_DEFINITION as _RMSNORM_ERRORS
from kernels.workloads.rmsnorm import TOLERANCE, errors, numpy_rmsnorm
from kernels.workloads.rmsnorm import numpy_into as _rmsnorm_into

EPS = 1e-5
ERROR_DEFINITION = (
    "per output (y and residual_out): " + _RMSNORM_ERRORS + "; the worst output counts. "
    "residual_out's float32 rounding of x + residual is ~6e-8 of the row maximum"
)


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded inputs with residual-stream statistics.

    ``residual``: N(0, 1) times a log-normal per-row scale; 10% of rows are scaled 5-20x; a
    few fixed outlier channels (one per 1024, at least one) carry magnitudes 20-50 in every
    row and 200-500 in about 5% of the rows (the "massive activations" of the starting and
    delimiter tokens in the residual stream of Llama-class models, Sun et al. 2024,
    arXiv:2402.17762). ``x`` (a sub-layer's output): N(0, 0.5^2) times a log-normal
    per-row scale. ``w`` ~ N(1, 0.2^2).

    Returns:
        ``{"x", "residual": float32 [rows, hidden], "w": float32 [hidden]}``, C-contiguous.
    """
    rows, hidden = int(shape["rows"]), int(shape["hidden"])
    rng = np.random.default_rng(seed)
    res = rng.standard_normal((rows, hidden), dtype=np.float32)
    res *= np.exp(rng.normal(0.0, 0.5, size=(rows, 1))).astype(np.float32)
    outlier_rows = rng.random(rows) < 0.1
    res[outlier_rows] *= rng.uniform(5.0, 20.0, size=(int(outlier_rows.sum()), 1)).astype(np.float32)
    n_massive = max(1, hidden // 1024)
    channels = rng.choice(hidden, size=n_massive, replace=False)
    massive = rng.uniform(20.0, 50.0, size=(rows, n_massive))
    bos_like = rng.random(rows) < 0.05
    massive[bos_like] *= 10.0
    massive *= rng.choice([-1.0, 1.0], size=n_massive)
    res[:, channels] = massive.astype(np.float32)
    x = rng.standard_normal((rows, hidden), dtype=np.float32)
    x *= (0.5 * np.exp(rng.normal(0.0, 0.5, size=(rows, 1)))).astype(np.float32)
    w = rng.normal(1.0, 0.2, size=hidden).astype(np.float32)
    return {"x": np.ascontiguousarray(x), "residual": np.ascontiguousarray(res), "w": np.ascontiguousarray(w)}


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"y": float64 [rows, hidden], "residual_out": float64 [rows, hidden]}``."""
    r = inputs["x"].astype(np.float64) + inputs["residual"].astype(np.float64)
    w = inputs["w"].astype(np.float64)
    eps = float(np.float32(attrs["eps"]))  # the kernel receives eps as a C float
    y = r / np.sqrt(np.mean(r * r, axis=-1, keepdims=True) + eps) * w
    return {"y": y, "residual_out": r}


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    s = (int(shape["rows"]), int(shape["hidden"]))
    return {"y": s, "residual_out": s}


def flops(shape: Shape) -> float:
    """5 FLOP per element (residual add, square, add to the sum, two multiplies); the
    per-row sqrt is ignored."""
    return 5.0 * shape["rows"] * shape["hidden"]


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read x and residual, write y and residual_out
    (rows*hidden each) and read w, 4 bytes each."""
    return (4.0 * shape["rows"] * shape["hidden"] + shape["hidden"]) * 4.0


_ROWS = (1, 16, 64, 170)

def numpy_fused_add_rmsnorm(
    x: np.ndarray, residual: np.ndarray, w: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray]:
    """Plain NumPy float32 fused add + RMSNorm: ``(y, residual_out)``, each [rows, hidden]."""
    r = x + residual
    return numpy_rmsnorm(r, w, eps), r


def numpy_baseline(inputs: Arrays, attrs: Mapping[str, float], out: dict) -> tuple[np.ndarray, np.ndarray]:
    """The NumPy baseline (:attr:`Workload.numpy_baseline`): :func:`numpy_fused_add_rmsnorm`."""
    return numpy_fused_add_rmsnorm(inputs["x"], inputs["residual"], inputs["w"], attrs["eps"])


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: ``residual_out = x + residual``, then rmsnorm's."""
    r = o["residual_out"]
    np.add(i["x"], i["residual"], out=r)
    _rmsnorm_into({"x": r, "w": i["w"]}, {"y": o["y"]}, s, a)


# template.c
CPU_SPACE = DesignSpace(
    parameters=(
        Parameter("ROWS_PER_CHUNK", (1, 2, 4, 8, 16, 32)),
        Parameter("UNROLL", (1, 2, 4, 8)),
        Parameter("VEC", (1, 4, 8, 16)),
        Parameter("ACC_DOUBLE", (0, 1)),
        Parameter("RECOMPUTE", (0, 1)),
    ),
    restrictions=("UNROLL * VEC <= 64",),
)
# template.cu: the kernel structure and tunables of rmsnorm's
CUDA_SPACE = _RMSNORM_CUDA_SPACE


def launch_plan(params: Mapping[str, Any]) -> dict[str, Any]:
    """Launch plan of template.cu: one row-wise launch (:func:`rows_launch_plan`)."""
    return rows_launch_plan("fused_add_rmsnorm_kernel", "rows", "hidden",
                            ["x", "residual", "w", "y", "residual_out", "rows", "hidden", "eps"])


FUSED_ADD_RMSNORM = Workload(
    name="fused_add_rmsnorm",
    c_signature=(
        "void fused_add_rmsnorm(const float *x, const float *residual, const float *w, "
        "float *y, float *residual_out, int rows, int hidden, float eps)"
    ),
    args=(
        Arg("x", "in"),
        Arg("residual", "in"),
        Arg("w", "in"),
        Arg("y", "out"),
        Arg("residual_out", "out"),
        Arg("rows", "int"),
        Arg("hidden", "int"),
        Arg("eps", "float"),
    ),
    attrs={"eps": EPS},
    shape_sets={
        "llama3-8b": tuple({"rows": r, "hidden": 4096} for r in _ROWS),
        "deepseek-v3": tuple({"rows": r, "hidden": 7168} for r in _ROWS),
        "test-small": tuple({"rows": r, "hidden": 256} for r in (1, 8)),
    },
    shape_set_attrs={"deepseek-v3": {"eps": 1e-6}},
    # Not multiples of any tile: remainder loops and ragged row chunks.
    validation_shapes={
        "llama3-8b": ({"rows": 7, "hidden": 4099},),
        "deepseek-v3": ({"rows": 15, "hidden": 7171},),
        "test-small": ({"rows": 7, "hidden": 259},),
    },
    generate=generate,
    reference=reference,
    output_shapes=output_shapes,
    errors=errors,
    tolerance=TOLERANCE,
    flops=flops,
    bytes=nbytes,
    error_definition=ERROR_DEFINITION,
    spaces={"cpu": CPU_SPACE, "cuda": CUDA_SPACE},
    launch_plan=launch_plan,
    numpy_baseline=numpy_baseline,
    # FlashInfer Trace definition of this math (definitions/rmsnorm/fused_add_rmsnorm_h4096.json)
    flashinfer={"fused_add_rmsnorm_h4096": {"batch_size": "rows", "hidden_size": "hidden"}},
    shape_of=axes_2d("x", "rows", "hidden"),
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = FUSED_ADD_RMSNORM
