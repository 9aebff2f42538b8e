"""SwiGLU activation of a fused gate/up projection: ``y = silu(gate) * up``, float32.

Input ``x`` [rows, 2 * inter]: each row is ``[gate (inter) | up (inter)]``, the output of
Llama's fused ``gate_up_proj``; output ``y`` [rows, inter];
``silu(a) = a / (1 + exp(-a))`` (Shazeer 2020, arXiv:2002.05202). This is vLLM's
``SiluAndMul`` and FlashInfer's ``silu_and_mul``. Reference in float64.

Shapes: Llama-3-8B's MLP (intermediate 14336) for 1, 32 and 512 tokens.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import activations, f32, row_error_definition, row_errors
from kernels.workloads.base import Arg, Arrays, Shape, Workload

# Row-normalised; float32 expf and a division: ~2e-7 of the row maximum. Swapping gate and
# up, using sigmoid instead of silu or a bf16 exp fails by >1e-3.
TOLERANCE = 1e-5
ERROR_DEFINITION = row_error_definition(TOLERANCE)


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded inputs: gate N(0, 2^2)-ish with outlier channels (large negative gates make
    ``exp(-a)`` overflow in float32: a kernel must still return ``-0``, not NaN), up
    LLM-like activations.

    Returns:
        ``{"x": float32 [rows, 2 * inter]}``, C-contiguous.
    """
    rows, inter = int(shape["rows"]), int(shape["inter"])
    rng = np.random.default_rng(seed)
    gate = 2.0 * activations(rng, rows, inter)
    if rows and inter:
        gate[:, rng.integers(inter)] = -120.0  # exp(120) overflows float32
    up = activations(rng, rows, inter)
    return f32(x=np.concatenate([gate, up], axis=1))


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"y": float64 [rows, inter]}``."""
    x = inputs["x"].astype(np.float64)
    inter = x.shape[1] // 2
    g, u = x[:, :inter], x[:, inter:]
    return {"y": g / (1.0 + np.exp(-g)) * u}


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    return {"y": (int(shape["rows"]), int(shape["inter"]))}


def flops(shape: Shape) -> float:
    """5 FLOP per output (negate, exp counted as 1, add, divide, multiply)."""
    return 5.0 * shape["rows"] * shape["inter"]


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read gate and up, write y; 4 bytes each."""
    return 12.0 * shape["rows"] * shape["inter"]


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: ``silu(gate) * up`` with ``gate, up = x[:, :n], x[:, n:]``."""
    x, y = i["x"], o["y"]
    n = y.shape[1]
    g = x[:, :n]
    with np.errstate(over="ignore"):
        np.exp(-g, out=y)
    y += np.float32(1.0)
    np.divide(g, y, out=y)
    y *= x[:, n:]


# template.c
CPU_SPACE = DesignSpace(
    parameters=(
        Parameter("CHUNK", (512, 2048, 8192)),
        Parameter("SIGMOID", (0, 1)),
    ),
    restrictions=(),
)


SWIGLU = Workload(
    name="swiglu",
    c_signature="void swiglu(const float *x, float *y, int rows, int inter)",
    args=(Arg("x", "in"), Arg("y", "out"), Arg("rows", "int"), Arg("inter", "int")),
    attrs={},
    shape_sets={
        "llama3-8b": tuple({"rows": r, "inter": 14336} for r in (1, 32, 512)),
        "test-small": tuple({"rows": r, "inter": 256} for r in (1, 8)),
    },
    validation_shapes={
        "llama3-8b": ({"rows": 7, "inter": 14339},),
        "test-small": ({"rows": 7, "inter": 259},),
    },
    generate=generate,
    reference=reference,
    output_shapes=output_shapes,
    errors=row_errors,
    tolerance=TOLERANCE,
    flops=flops,
    bytes=nbytes,
    error_definition=ERROR_DEFINITION,
    spaces={"cpu": CPU_SPACE},
    shape_of=lambda i: {"rows": int(i["x"].shape[0]), "inter": int(i["x"].shape[1]) // 2},
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = SWIGLU
