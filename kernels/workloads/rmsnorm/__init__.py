"""RMSNorm: ``y = x / sqrt(mean(x**2, axis=-1) + eps) * w``, per row, float32.

Inputs ``x`` [rows, hidden] float32 and ``w`` [hidden] float32; output ``y`` [rows, hidden]
float32. Reference in float64. Shapes from Llama-3-8B (hidden 4096, eps 1e-5; 1 token =
decode, 32 = small batch, 512 = prefill chunk) and DeepSeek-V3 / Kimi K2 (hidden 7168,
eps 1e-6 via ``shape_set_attrs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import axes_2d, row_errors, rows_launch_plan
from kernels.workloads.base import Arg, Arrays, Shape, Workload

EPS = 1e-5
# Row-normalised error bound. Float32 rounding of the sum of squares grows like
# sqrt(hidden) * 2**-24 for a single accumulator (~4e-6 at hidden 4096) plus ~2 ulp per
# element; 5e-5 leaves >10x margin for any reasonable float32 kernel while a kernel that
# drops one element of the sum (~1/(2*hidden) = 1.2e-4 at 4096) or ignores w fails.
TOLERANCE = 5e-5
# Denominator floor so an all-zero reference row cannot blow up the relative error.
REL_FLOOR = 1e-6

ERROR_DEFINITION = (
    "max_abs_error = max |y - ref|; max_rel_error = max over rows of "
    "max_j |y - ref| / max(max_j |ref|, 1e-6) (error relative to the row's largest "
    f"output, robust to near-zero elements); pass iff max_rel_error <= {TOLERANCE:g}"
)


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded inputs with LLM-like activation statistics.

    ``x`` is N(0, 1) times a log-normal per-row scale; the first row and about 10% of the others
    (tokens such as BOS) are outliers scaled 5-20x, and a few fixed "massive activation" channels
    (Sun et al. 2024, arXiv:2402.17762) carry magnitudes 20-50. ``w`` ~ N(1, 0.2).

    Returns:
        ``{"x": float32 [rows, hidden], "w": float32 [hidden]}``, C-contiguous.
    """
    rows, hidden = int(shape["rows"]), int(shape["hidden"])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, hidden), dtype=np.float32)
    x *= np.exp(rng.normal(0.0, 0.5, size=(rows, 1))).astype(np.float32)
    outlier_rows = rng.random(rows) < 0.1
    outlier_rows[0] = True  # like BOS: every input set has at least one outlier row
    x[outlier_rows] *= rng.uniform(5.0, 20.0, size=(int(outlier_rows.sum()), 1)).astype(np.float32)
    n_massive = max(1, hidden // 1024)
    channels = rng.choice(hidden, size=n_massive, replace=False)
    massive = rng.uniform(20.0, 50.0, size=(rows, n_massive)) * rng.choice([-1.0, 1.0], size=n_massive)
    x[:, channels] = massive.astype(np.float32)
    w = rng.normal(1.0, 0.2, size=hidden).astype(np.float32)
    return {"x": np.ascontiguousarray(x), "w": np.ascontiguousarray(w)}


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"y": float64 [rows, hidden]}``."""
    y = inputs["x"].astype(np.float64)
    w = inputs["w"].astype(np.float64)
    eps = float(np.float32(attrs["eps"]))  # the kernel receives eps as a C float
    mean_sq = np.einsum("ij,ij->i", y, y) / max(y.shape[-1], 1)  # no [rows, hidden] temporary
    y *= (1.0 / np.sqrt(mean_sq + eps))[:, None]  # in place: this runs on every validated case
    y *= w
    return {"y": y}


def errors(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """``(max_abs_error, max_rel_error)`` as in :data:`ERROR_DEFINITION`; NaN if ``out`` has
    NaN/inf (callers check finiteness first)."""
    return row_errors(out, ref, REL_FLOOR)


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    return {"y": (int(shape["rows"]), int(shape["hidden"]))}


def flops(shape: Shape) -> float:
    """4 FLOP per element (square, add, two multiplies); the per-row sqrt is ignored."""
    return 4.0 * shape["rows"] * shape["hidden"]


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read x, write y (rows*hidden each) and read w, 4 bytes each."""
    return (2.0 * shape["rows"] * shape["hidden"] + shape["hidden"]) * 4.0


def numpy_rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Plain NumPy float32 RMSNorm: ``x`` [rows, hidden], ``w`` [hidden] -> [rows, hidden]."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w


def numpy_baseline(inputs: Arrays, attrs: Mapping[str, float], out: dict) -> np.ndarray:
    """The NumPy baseline (:attr:`Workload.numpy_baseline`): :func:`numpy_rmsnorm`."""
    return numpy_rmsnorm(inputs["x"], inputs["w"], attrs["eps"])


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: ``y`` from one einsum sum of squares per row."""
    x = i["x"]
    ms = np.einsum("ij,ij->i", x, x, dtype=np.float32)[:, None] / np.float32(x.shape[1])
    np.multiply(x, 1.0 / np.sqrt(ms + np.float32(a["eps"])), out=o["y"])
    o["y"] *= i["w"]


# template.c
CPU_SPACE = DesignSpace(
    parameters=(
        Parameter("ROWS_PER_CHUNK", (1, 2, 4, 8, 16, 32)),
        Parameter("UNROLL", (1, 2, 4, 8)),
        Parameter("VEC", (1, 4, 8, 16)),
        Parameter("ACC_DOUBLE", (0, 1)),
    ),
    restrictions=("UNROLL * VEC <= 64",),
)
# template.cu
CUDA_SPACE = DesignSpace(
    parameters=(
        Parameter("BLOCK_SIZE", (64, 128, 256, 512, 1024)),
        Parameter("THREADS_PER_ROW", (8, 16, 32, 64, 128, 256, 512, 1024)),
        Parameter("VEC", (1, 2, 4)),
        Parameter("UNROLL", (1, 2, 4)),
        Parameter("USE_SMEM", (0, 1)),
    ),
    restrictions=(
        "THREADS_PER_ROW <= BLOCK_SIZE",
        # row cache of ROWS_PER_BLOCK rows (used only when it fits 200 KiB): hidden 4096
        # needs 16 KiB per row, so more than 8 rows per block would never use it
        "USE_SMEM == 0 or BLOCK_SIZE // THREADS_PER_ROW <= 8",
        "VEC * UNROLL <= 16",
    ),
)


def launch_plan(params: Mapping[str, Any]) -> dict[str, Any]:
    """Launch plan of template.cu: one row-wise launch (:func:`rows_launch_plan`)."""
    return rows_launch_plan("rmsnorm_kernel", "rows", "hidden", ["x", "w", "y", "rows", "hidden", "eps"])


RMSNORM = Workload(
    name="rmsnorm",
    c_signature="void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)",
    args=(
        Arg("x", "in"),
        Arg("w", "in"),
        Arg("y", "out"),
        Arg("rows", "int"),
        Arg("hidden", "int"),
        Arg("eps", "float"),
    ),
    attrs={"eps": EPS},
    shape_sets={
        "llama3-8b": tuple({"rows": r, "hidden": 4096} for r in (1, 32, 512)),
        "deepseek-v3": tuple({"rows": r, "hidden": 7168} for r in (1, 32, 512)),
        "test-small": tuple({"rows": r, "hidden": 256} for r in (1, 8)),
    },
    # DeepSeek-V3 / Kimi K2 (hidden 7168) use rms_norm_eps 1e-6 (their config.json).
    shape_set_attrs={"deepseek-v3": {"eps": 1e-6}},
    # Not multiples of any tile: exercise remainder loops and ragged row chunks.
    validation_shapes={
        "llama3-8b": ({"rows": 7, "hidden": 4099},),
        "deepseek-v3": ({"rows": 7, "hidden": 7171},),
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
    # FlashInfer Trace definition of this math (definitions/rmsnorm/rmsnorm_h4096.json)
    flashinfer={"rmsnorm_h4096": {"batch_size": "rows", "hidden_size": "hidden"}},
    shape_of=axes_2d("x", "rows", "hidden"),
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = RMSNORM
