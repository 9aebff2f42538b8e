"""GELU (exact, erf form): ``y = 0.5 * x * (1 + erf(x / sqrt(2)))``, elementwise, float32.

Input ``x`` [rows, cols], output ``y`` [rows, cols]. This is BERT's / all-MiniLM-L6-v2's
``hidden_act = "gelu"`` (``torch.nn.functional.gelu`` with ``approximate="none"``;
Hendrycks & Gimpel 2016, arXiv:1606.08415). The tanh approximation differs from it by up to
~5e-4 of a row's largest output and is *not* this workload. Reference in float64.

Shapes: MiniLM's FFN intermediate (1536 = 4 x 384) for 16 and 512 tokens; BERT-base's 3072.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import activations, axes_2d, f32, gelu64, gelu_, row_error_definition, row_errors
from kernels.workloads.base import Arg, Arrays, Shape, Workload

# Row-normalised bound: float32 erff is ~1 ulp, a good polynomial erf (Abramowitz & Stegun
# 7.1.26, 1.5e-7 absolute) ~3e-7 of the row maximum; the tanh approximation (~5e-4) fails.
TOLERANCE = 1e-5
ERROR_DEFINITION = row_error_definition(TOLERANCE)


def generate(shape: Shape, seed: int) -> Arrays:
    """``x``: pre-activation statistics of an FFN up-projection: N(0, 1.5^2) times a
    log-normal per-row scale, with outlier channels of magnitude 10-60 (either sign: the
    negative tail is where GELU's exp/erf underflow paths are exercised).

    Returns:
        ``{"x": float32 [rows, cols]}``, C-contiguous.
    """
    rows, cols = int(shape["rows"]), int(shape["cols"])
    rng = np.random.default_rng(seed)
    return f32(x=1.5 * activations(rng, rows, cols))


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"y": float64 [rows, cols]}``."""
    return {"y": gelu64(inputs["x"])}


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    return {"y": (int(shape["rows"]), int(shape["cols"]))}


def flops(shape: Shape) -> float:
    """About 20 FLOP per element for erf (a rational/polynomial approximation) and 4 for the
    rest; a convention, stated so GFLOP/s figures compare."""
    return 24.0 * shape["rows"] * shape["cols"]


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read x, write y, 4 bytes each."""
    return 8.0 * shape["rows"] * shape["cols"]


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: exact GELU (scipy's erf)."""
    np.copyto(o["y"], i["x"])
    gelu_(o["y"])


# template.c
CPU_SPACE = DesignSpace(
    parameters=(
        Parameter("ERF_IMPL", (0, 1)),
        Parameter("CHUNK", (1024, 4096, 16384)),
    ),
    restrictions=(),
)


GELU = Workload(
    name="gelu",
    c_signature="void gelu(const float *x, float *y, int rows, int cols)",
    args=(Arg("x", "in"), Arg("y", "out"), Arg("rows", "int"), Arg("cols", "int")),
    attrs={},
    shape_sets={
        "minilm-l6": tuple({"rows": r, "cols": 1536} for r in (16, 512)),
        "bert-base": tuple({"rows": r, "cols": 3072} for r in (16, 512)),
        "test-small": tuple({"rows": r, "cols": 256} for r in (1, 8)),
    },
    validation_shapes={
        "minilm-l6": ({"rows": 7, "cols": 1539},),
        "bert-base": ({"rows": 7, "cols": 3075},),
        "test-small": ({"rows": 7, "cols": 259},),
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
    shape_of=axes_2d("x", "rows", "cols"),
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = GELU
