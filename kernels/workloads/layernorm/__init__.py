"""LayerNorm: ``y = (x - mean(x)) / sqrt(var(x) + eps) * w + b``, per row, float32.

Inputs ``x`` [rows, hidden], ``w`` [hidden] (gamma), ``b`` [hidden] (beta); output ``y``
[rows, hidden]; all float32, row-major. ``var`` is the biased (population) variance, as in
``torch.nn.LayerNorm`` (Ba et al. 2016, arXiv:1607.06450). Reference in float64.

Shapes: all-MiniLM-L6-v2 / BERT (hidden 384, ``layer_norm_eps`` 1e-12 in its
``config.json``); rows = tokens in a batch: 16 (one sentence), 512 (a batch of 32
sentences of 16 tokens). BERT-base (hidden 768) as a second model.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import axes_2d, f32, row_error_definition, row_errors
from kernels.workloads.base import Arg, Arrays, Shape, Workload

EPS = 1e-12
# Row-normalised error bound. A two-pass float32 LayerNorm measures ~1e-7..1e-6 here; the
# inputs carry a per-row offset of up to 40 standard deviations (the residual stream of a BERT
# is far from zero-mean), so the one-pass ``E[x^2] - E[x]^2`` in float32 loses ~1e-3 to
# cancellation and fails, as does dropping the bias or the mean.
TOLERANCE = 5e-5
ERROR_DEFINITION = row_error_definition(TOLERANCE)


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded inputs: ``x`` = per-row offset (N(0, 15^2), clipped to +-40) plus N(0, 1) times
    a log-normal per-row scale, with one outlier channel per 256 (magnitude 5-20, the
    "outlier dimensions" of BERT's LayerNorm inputs, Kovaleva et al. 2021,
    arXiv:2105.06990); ``w`` ~ N(1, 0.2^2), ``b`` ~ N(0, 0.1^2).

    Returns:
        ``{"x": [rows, hidden], "w": [hidden], "b": [hidden]}``, float32, C-contiguous.
    """
    rows, hidden = int(shape["rows"]), int(shape["hidden"])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, hidden)) * np.exp(rng.normal(0.0, 0.5, size=(rows, 1)))
    x += np.clip(rng.normal(0.0, 15.0, size=(rows, 1)), -40.0, 40.0)
    n = max(1, hidden // 256)
    ch = rng.choice(hidden, size=min(n, hidden), replace=False)
    x[:, ch] += rng.uniform(5.0, 20.0, size=(rows, ch.size)) * rng.choice([-1.0, 1.0], size=ch.size)
    return f32(x=x, w=rng.normal(1.0, 0.2, size=hidden), b=rng.normal(0.0, 0.1, size=hidden))


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"y": float64 [rows, hidden]}``."""
    x = inputs["x"].astype(np.float64)
    eps = float(np.float32(attrs["eps"]))  # the kernel receives eps as a C float
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return {"y": (x - mu) / np.sqrt(var + eps) * inputs["w"].astype(np.float64) + inputs["b"].astype(np.float64)}


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    return {"y": (int(shape["rows"]), int(shape["hidden"]))}


def flops(shape: Shape) -> float:
    """8 FLOP per element: mean (1), centred square (2), variance sum (1), normalise, scale,
    shift (4); the per-row sqrt and divisions are ignored."""
    return 8.0 * shape["rows"] * shape["hidden"]


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read x, write y, read w and b; 4 bytes each."""
    return 4.0 * (2.0 * shape["rows"] * shape["hidden"] + 2.0 * shape["hidden"])


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: two-pass mean and variance per row."""
    x, y = i["x"], o["y"]
    mu = x.mean(axis=1, keepdims=True)
    np.subtract(x, mu, out=y)
    var = np.einsum("ij,ij->i", y, y, dtype=np.float32)[:, None] / np.float32(x.shape[1])
    y *= 1.0 / np.sqrt(var + np.float32(a["eps"]))
    y *= i["w"]
    y += i["b"]


# template.c: ALGO 0 two-pass, 1 shifted one-pass (both exact enough); LANES partial sums.
CPU_SPACE = DesignSpace(
    parameters=(
        Parameter("ROWS_PER_CHUNK", (1, 2, 4, 8, 16, 32)),
        Parameter("LANES", (1, 4, 8, 16, 32)),
        Parameter("ACC_DOUBLE", (0, 1)),
        Parameter("ALGO", (0, 1)),
    ),
    restrictions=(),
)


LAYERNORM = Workload(
    name="layernorm",
    c_signature="void layernorm(const float *x, const float *w, const float *b, float *y, int rows, int hidden, float eps)",
    args=(Arg("x", "in"), Arg("w", "in"), Arg("b", "in"), Arg("y", "out"),
          Arg("rows", "int"), Arg("hidden", "int"), Arg("eps", "float")),
    attrs={"eps": EPS},
    shape_sets={
        "minilm-l6": tuple({"rows": r, "hidden": 384} for r in (16, 512)),
        "bert-base": tuple({"rows": r, "hidden": 768} for r in (16, 512)),
        "test-small": tuple({"rows": r, "hidden": 256} for r in (1, 8)),
    },
    validation_shapes={
        "minilm-l6": ({"rows": 7, "hidden": 387},),
        "bert-base": ({"rows": 7, "hidden": 771},),
        "test-small": ({"rows": 7, "hidden": 259},),
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
    shape_of=axes_2d("x", "rows", "hidden"),
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = LAYERNORM
