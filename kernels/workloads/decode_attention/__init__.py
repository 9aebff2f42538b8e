"""Decode attention over a KV cache (one new query token per sequence), float32:

    o[b, h] = sum_j softmax_j(scale * q[b, h] . k[b, j, h // G]) v[b, j, h // G],  j < kv_len

with ``scale = head_dim ** -0.5``, ``G = heads / kv_heads`` (GQA). The cache already holds
the new token's key and value (the engine appends them first), so no mask is needed.
FlashInfer's ``single_decode_with_kv_cache`` / ``BatchDecodeWithPagedKVCacheWrapper`` math.

Inputs: ``q`` [batch, heads, head_dim]; ``k``, ``v`` [batch, kv_len, kv_heads, head_dim]
(token-major cache, "NHD" in FlashInfer's terms); output ``o`` [batch, heads, head_dim];
float32, row-major. Reference in float64.

Shapes: Llama-3-8B (32 query / 8 KV heads of 128) decoding one sequence at 512 and 4096
tokens of context, and 8 sequences at 1024.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import f32, row_error_definition, row_errors, softmax_rows_
from kernels.workloads.attention import attend64, qkv
from kernels.workloads.base import Arg, Arrays, Shape, Workload

TOLERANCE = 5e-5
ERROR_DEFINITION = row_error_definition(TOLERANCE, "sequence and head (head_dim values)")
AXES = ("batch", "kv_len", "heads", "kv_heads", "head_dim")


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded inputs with attention-like statistics (peaky heads, a large-norm first key; see
    :func:`kernels.workloads.attention.qkv`).

    Returns:
        ``{"q": [B, H, D], "k", "v": [B, L, KVH, D]}``, float32, C-contiguous.
    """
    b, n, h, kvh, d = (int(shape[a]) for a in AXES)
    q, k, v = qkv(np.random.default_rng(seed), b, 1, n, h, kvh, d)
    return f32(q=q[:, 0], k=k, v=v)


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"o": float64 [B, H, D]}``."""
    return {"o": attend64(inputs["q"][:, None], inputs["k"], inputs["v"], causal=False)[:, 0]}


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    return {"o": (int(shape["batch"]), int(shape["heads"]), int(shape["head_dim"]))}


def flops(shape: Shape) -> float:
    """``4 B H L D``: q.k and p.v, a multiply and an add each, per cached token and head."""
    return 4.0 * shape["batch"] * shape["heads"] * shape["kv_len"] * shape["head_dim"]


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read the K and V cache once, read q and write o; 4 bytes each."""
    b, n, h, kvh, d = (shape[a] for a in AXES)
    return 4.0 * b * d * (2 * n * kvh + 2 * h)


def _s(b: int, n: int, h: int, kvh: int, d: int) -> Shape:
    return {"batch": b, "kv_len": n, "heads": h, "kv_heads": kvh, "head_dim": d}


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: batched matmuls per KV head group."""
    q, k, v = i["q"], i["k"], i["v"]
    B, H, D = q.shape
    KVH = k.shape[2]
    G = H // KVH
    qg = q.reshape(B, KVH, G, D)
    sc = np.matmul(qg, k.transpose(0, 2, 3, 1)) * np.float32(D**-0.5)  # [B, KVH, G, L]
    softmax_rows_(sc)
    o["o"][...] = np.matmul(sc, v.transpose(0, 2, 1, 3)).reshape(B, H, D)


# template.c
CPU_SPACE = DesignSpace(
    parameters=(
        Parameter("BK", (16, 32, 64, 128, 256)),
        Parameter("GROUP", (0, 1)),
    ),
    restrictions=(),
)


DECODE_ATTENTION = Workload(
    name="decode_attention",
    c_signature=("void decode_attention(const float *q, const float *k, const float *v, float *o, int batch, "
                 "int kv_len, int heads, int kv_heads, int head_dim)"),
    args=(Arg("q", "in"), Arg("k", "in"), Arg("v", "in"), Arg("o", "out"), *(Arg(a, "int") for a in AXES)),
    attrs={},
    shape_sets={
        "llama3-8b-decode": (_s(1, 512, 32, 8, 128), _s(1, 4096, 32, 8, 128), _s(8, 1024, 32, 8, 128)),
        "test-small": (_s(1, 64, 4, 2, 16), _s(2, 100, 4, 2, 16)),
    },
    validation_shapes={
        "llama3-8b-decode": (_s(3, 333, 32, 8, 128),),
        "test-small": (_s(3, 37, 4, 2, 13), _s(1, 1, 6, 3, 16)),
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
    shape_of=lambda i: {"batch": int(i["q"].shape[0]), "heads": int(i["q"].shape[1]),
                          "head_dim": int(i["q"].shape[2]), "kv_len": int(i["k"].shape[1]),
                          "kv_heads": int(i["k"].shape[2])},
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = DECODE_ATTENTION
