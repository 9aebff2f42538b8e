"""Rotary position embedding (RoPE), Llama's "rotate half" convention, float32:

    y[t, h, i]       = x[t, h, i] * cos[t, i] - x[t, h, i + D/2] * sin[t, i]
    y[t, h, i + D/2] = x[t, h, i + D/2] * cos[t, i] + x[t, h, i] * sin[t, i],   i < D/2

(Su et al. 2021, arXiv:2104.09864; Hugging Face ``apply_rotary_pos_emb`` /
``rotate_half``, FlashInfer's ``apply_rope`` with ``interleave=False``). The angle table is
an input (``cos``, ``sin`` [tokens, head_dim/2], ``theta_i = pos * base^(-2i/D)``), so one
kernel serves prefill (positions 0..T-1) and decode (one position) and any scaling scheme.

Inputs ``x`` [tokens, heads, head_dim], ``cos``, ``sin`` [tokens, head_dim / 2]; output
``y`` [tokens, heads, head_dim]; float32. ``head_dim`` is even. Reference in float64.

Shapes: Llama-3-8B's query (32 heads) and key (8 heads) of 128, rope_theta 500000, one
decode token and a 512-token prompt.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import activations, f32, row_error_definition, row_errors
from kernels.workloads.base import Arg, Arrays, Shape, Workload

ROPE_THETA = 500000.0  # Llama-3 config.json rope_theta
# Row-normalised (one row = one token's head). Float32: two products and a sum, ~1e-7 of the
# row maximum; the interleaved (GPT-J) convention, a swapped sign or a wrong half are O(1).
TOLERANCE = 1e-5
ERROR_DEFINITION = row_error_definition(TOLERANCE, "token and head (head_dim values)")


def angles(positions: np.ndarray, head_dim: int, base: float = ROPE_THETA) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)`` float32 [len(positions), head_dim / 2] of ``pos * base^(-2i/D)``,
    computed in float64 (what Hugging Face's ``LlamaRotaryEmbedding`` caches, in float32)."""
    inv = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded inputs: ``x`` LLM-like activations (outlier channels), positions a run of
    ``tokens`` consecutive positions from a random start in [0, 8192).

    Returns:
        ``{"x": [T, H, D], "cos", "sin": [T, D/2]}``, float32, C-contiguous.
    """
    t, h, d = int(shape["tokens"]), int(shape["heads"]), int(shape["head_dim"])
    rng = np.random.default_rng(seed)
    x = activations(rng, t * h, d).reshape(t, h, d)
    cos, sin = angles(rng.integers(0, 8192) + np.arange(t), d)
    return f32(x=x, cos=cos, sin=sin)


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"y": float64 [T, H, D]}``."""
    x = inputs["x"].astype(np.float64)
    c = inputs["cos"].astype(np.float64)[:, None, :]
    s = inputs["sin"].astype(np.float64)[:, None, :]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return {"y": np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)}


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    return {"y": (int(shape["tokens"]), int(shape["heads"]), int(shape["head_dim"]))}


def flops(shape: Shape) -> float:
    """3 FLOP per element (two multiplies and an add per output)."""
    return 3.0 * shape["tokens"] * shape["heads"] * shape["head_dim"]


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read x, write y, read the cos/sin rows; 4 bytes each."""
    t, h, d = shape["tokens"], shape["heads"], shape["head_dim"]
    return 4.0 * (2 * t * h * d + t * d)


def _s(t: int, h: int, d: int = 128) -> Shape:
    return {"tokens": t, "heads": h, "head_dim": d}


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: the rotate-half form on the two halves of the last axis."""
    x, y = i["x"], o["y"]
    half = x.shape[-1] // 2
    c, sn = i["cos"][:, None, :], i["sin"][:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    np.subtract(x1 * c, x2 * sn, out=y[..., :half])
    np.add(x2 * c, x1 * sn, out=y[..., half:])


# template.c
CPU_SPACE = DesignSpace(
    parameters=(
        Parameter("ROWS_PER_CHUNK", (1, 4, 8, 32)),
        Parameter("PAR_MIN_ROWS", (1, 64, 1024)),
    ),
    restrictions=(),
)


ROPE = Workload(
    name="rope",
    c_signature="void rope(const float *x, const float *cos, const float *sin, float *y, int tokens, int heads, int head_dim)",
    args=(Arg("x", "in"), Arg("cos", "in"), Arg("sin", "in"), Arg("y", "out"),
          Arg("tokens", "int"), Arg("heads", "int"), Arg("head_dim", "int")),
    attrs={},
    shape_sets={
        "llama3-8b-q": (_s(1, 32), _s(512, 32)),
        "llama3-8b-k": (_s(1, 8), _s(512, 8)),
        "test-small": (_s(1, 4, 32), _s(8, 4, 32)),
    },
    validation_shapes={
        "llama3-8b-q": (_s(7, 32),),
        "llama3-8b-k": (_s(7, 8),),
        "test-small": (_s(7, 3, 26),),
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
    shape_of=lambda i: dict(zip(("tokens", "heads", "head_dim"), map(int, i["x"].shape))),
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = ROPE
