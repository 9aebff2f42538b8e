"""Row-wise softmax over a vocabulary: ``y[r, :] = exp(x[r, :]) / sum(exp(x[r, :]))``, float32.

Input ``x`` [rows, cols] (logits), output ``y`` [rows, cols] (probabilities), float32,
row-major. Reference in float64 with the max subtracted (exact for any finite input).
``cols`` is Llama-3's vocabulary, 128256 (``config.json`` of meta-llama/Meta-Llama-3-8B;
FlashInfer Trace ``definitions/sampling/top_k_top_p_sampling_from_probs_v128256.json``);
``rows`` is the decode batch.

The logits are what a sampler really sees, and a softmax that does not subtract the row
maximum overflows on them: low-temperature rows reach several hundred (``exp`` overflows
float32 above 88.7), shifted rows are far below -104 (``exp`` underflows to 0 everywhere
and the sum is 0), and masked entries are ``-inf`` (grammar-constrained decoding masks
disallowed tokens with ``-inf`` in vLLM and FlashInfer), including masked first elements,
which break an online (one-pass) softmax that starts from ``max = -inf`` carelessly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import axes_2d, batched_salted_reference, row_errors, rows_launch_plan
from kernels.workloads.base import Arg, Arrays, Shape, Workload

VOCAB = 128256
# Row-normalised error bound (see ERROR_DEFINITION). The error of a float32 softmax is
# dominated by the float32 sum of ~1e5 terms: measured ~1e-6 with one sequential float32
# accumulator, ~1e-7 with 8+ lanes; a 2-ulp polynomial exp adds ~2e-7, the scaled-exponent
# form exp2(x*log2e - m*log2e) ~2e-6. 2e-5 leaves a >10x margin while half-precision
# exponentials (~5e-4) or a missing normalisation fail.
TOLERANCE = 2e-5
REL_FLOOR = 1e-30

ERROR_DEFINITION = (
    "max_abs_error = max |y - ref|; max_rel_error = max over rows of "
    "max_j |y - ref| / max_j ref (error relative to the row's largest probability; "
    "probabilities below ~1e-5 of the row maximum cannot matter to sampling and float32 "
    f"cannot represent the smallest of them); pass iff max_rel_error <= {TOLERANCE:g}"
)


_ROW_KINDS = ("cold", "plain", "shifted", "cold", "masked", "plain")


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded logits with the ranges a sampler sees.

    Every row: N(0, 2^2) plus 1-8 spike tokens at +30..+60 (the likely next tokens). Rows
    then cycle, from a random offset, through the kinds ``cold, plain, shifted, cold,
    masked, plain`` (any 6 consecutive rows hold every kind):

    - cold: low temperature, divided by T in [0.05, 0.5] (values up to ~1200);
    - shifted: minus 100..300 (every ``exp(x)`` underflows);
    - masked: 50-99% of the tokens set to ``-inf``, including the first one unless it is a
      spike (spikes stay finite, so every row has a finite maximum).

    Returns:
        ``{"x": float32 [rows, cols]}``, C-contiguous.
    """
    rows, cols = int(shape["rows"]), int(shape["cols"])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x *= np.float32(2.0)
    offset = int(rng.integers(len(_ROW_KINDS)))
    for r in range(rows):
        n_spikes = int(rng.integers(1, min(8, cols) + 1))
        spikes = rng.choice(cols, size=n_spikes, replace=False)
        x[r, spikes] += rng.uniform(30.0, 60.0, size=n_spikes).astype(np.float32)
        kind = _ROW_KINDS[(r + offset) % len(_ROW_KINDS)]
        if kind == "cold":
            x[r] /= np.float32(rng.uniform(0.05, 0.5))
        elif kind == "shifted":
            x[r] -= np.float32(rng.uniform(100.0, 300.0))
        elif kind == "masked":
            masked = rng.random(cols) < rng.uniform(0.5, 0.99)
            masked[0] = True
            masked[spikes] = False
            x[r, masked] = -np.inf
    return {"x": np.ascontiguousarray(x)}


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"y": float64 [rows, cols]}``, max-subtracted (``-inf`` -> 0)."""
    x = inputs["x"].astype(np.float64)
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return {"y": e / np.sum(e, axis=-1, keepdims=True)}


def errors(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """``(max_abs_error, max_rel_error)`` as in :data:`ERROR_DEFINITION`."""
    return row_errors(out, ref, REL_FLOOR)


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    return {"y": (int(shape["rows"]), int(shape["cols"]))}


def flops(shape: Shape) -> float:
    """5 FLOP per element: max compare, subtract, exp (counted as one), add to the sum,
    multiply by the reciprocal of the sum."""
    return 5.0 * shape["rows"] * shape["cols"]


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read x, write y, 4 bytes each: ``8 * rows * cols``."""
    return 8.0 * shape["rows"] * shape["cols"]


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    """Numerically stable row softmax in float32: [rows, cols] -> [rows, cols]."""
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    e /= np.sum(e, axis=-1, keepdims=True)
    return e


def numpy_baseline(inputs: Arrays, attrs: Mapping[str, float], out: dict) -> np.ndarray:
    """The NumPy baseline (:attr:`Workload.numpy_baseline`): :func:`numpy_softmax`."""
    return numpy_softmax(inputs["x"])


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: row max subtracted, exp, normalised, all in ``y``."""
    x, y = i["x"], o["y"]
    np.subtract(x, x.max(axis=1, keepdims=True), out=y)
    np.exp(y, out=y)
    y /= y.sum(axis=1, keepdims=True)


# template.c: EXP_DEGREE only matters with the polynomial exp, BLOCK only for ALGO 1.
CPU_SPACE = DesignSpace(
    parameters=(
        Parameter("ALGO", (0, 1, 2)),
        Parameter("VEC", (4, 8, 16)),
        Parameter("UNROLL", (1, 2, 4)),
        Parameter("EXP_POLY", (0, 1)),
        Parameter("EXP_DEGREE", (5, 6, 7)),
        Parameter("ACC_DOUBLE", (0, 1)),
        Parameter("BLOCK", (256, 1024, 4096)),
        Parameter("ROWS_PER_CHUNK", (1, 2, 4, 8)),
        Parameter("SPLIT_ROWS", (0, 1)),
    ),
    restrictions=(
        "BLOCK % (VEC * UNROLL) == 0",
        "EXP_POLY == 1 or EXP_DEGREE == 7",
        "ALGO == 1 or BLOCK == 1024",
    ),
)
# template.cu
CUDA_SPACE = DesignSpace(
    parameters=(
        Parameter("BLOCK_SIZE", (64, 128, 256, 512, 1024)),
        Parameter("THREADS_PER_ROW", (8, 16, 32, 64, 128, 256, 512, 1024)),
        Parameter("VEC", (1, 2, 4)),
        Parameter("ONLINE", (0, 1)),
        Parameter("USE_SMEM", (0, 1)),
    ),
    restrictions=(
        "THREADS_PER_ROW <= BLOCK_SIZE",
        # the row cache holds at most 200 KiB (vocabulary rows of 128256 floats never fit)
        "USE_SMEM == 0 or BLOCK_SIZE // THREADS_PER_ROW <= 8",
    ),
)


def launch_plan(params: Mapping[str, Any]) -> dict[str, Any]:
    """Launch plan of template.cu: one row-wise launch (:func:`rows_launch_plan`)."""
    return rows_launch_plan("softmax_kernel", "rows", "cols", ["x", "y", "rows", "cols"])


SOFTMAX = Workload(
    name="softmax",
    c_signature="void softmax(const float *x, float *y, int rows, int cols)",
    args=(Arg("x", "in"), Arg("y", "out"), Arg("rows", "int"), Arg("cols", "int")),
    attrs={},
    shape_sets={
        "llama3-8b": tuple({"rows": r, "cols": VOCAB} for r in (1, 16, 64)),
        "test-small": ({"rows": 1, "cols": 1000}, {"rows": 8, "cols": 1000}),
    },
    # Not multiples of any tile: remainder loops, ragged row chunks, odd split points.
    validation_shapes={
        "llama3-8b": ({"rows": 5, "cols": VOCAB + 7}, {"rows": 7, "cols": 1001}),
        "test-small": ({"rows": 7, "cols": 1003}, {"rows": 3, "cols": 37}),
    },
    generate=generate,
    reference=reference,
    output_shapes=output_shapes,
    errors=errors,
    tolerance=TOLERANCE,
    flops=flops,
    bytes=nbytes,
    error_definition=ERROR_DEFINITION,
    salted_reference=batched_salted_reference(reference),
    spaces={"cpu": CPU_SPACE, "cuda": CUDA_SPACE},
    launch_plan=launch_plan,
    numpy_baseline=numpy_baseline,
    shape_of=axes_2d("x", "rows", "cols"),
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = SOFTMAX
