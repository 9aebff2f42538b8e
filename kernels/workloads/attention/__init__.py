"""Prefill attention (multi-head / grouped-query), float32:

    o[b, i, h] = sum_j softmax_j(scale * q[b, i, h] . k[b, j, h // G] + mask[i, j]) v[b, j, h // G]

with ``scale = head_dim ** -0.5`` and ``G = heads / kv_heads`` query heads per key-value head
(GQA, Ainslie et al. 2023, arXiv:2305.13245; MHA when ``kv_heads == heads``). ``causal`` is
a workload attribute passed as a C float: ``1`` masks ``j > i`` (decoder prefill without a
cache, FlashInfer's ``single_prefill_with_kv_cache(causal=True)``), ``0`` attends to every
token (encoders such as MiniLM / BERT). Set per shape set (``shape_set_attrs``).

Inputs (token-major, the layout a QKV projection produces): ``q`` [batch, seq, heads,
head_dim], ``k``, ``v`` [batch, seq, kv_heads, head_dim]; output ``o`` [batch, seq, heads,
head_dim]; float32, row-major. Reference in float64.

Shapes: Llama-3-8B (32 query / 8 KV heads of 128, a 512-token prompt), all-MiniLM-L6-v2
(12 heads of 32, bidirectional, 1 and 32 sentences of 16 tokens).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import f32, row_error_definition, row_errors, softmax_rows_
from kernels.workloads.base import Arg, Arrays, Shape, Workload

# Row-normalised (one row = one query token's head_dim outputs of one head). Float32 online
# softmax (FlashAttention's rescaling) measures ~1e-7..1e-6; a kernel that does not subtract
# the running maximum overflows on the peaky heads, one that ignores the mask or the GQA
# mapping is off by >1e-1.
TOLERANCE = 5e-5
ERROR_DEFINITION = row_error_definition(TOLERANCE, "query token and head (head_dim values)")
AXES = ("batch", "seq", "heads", "kv_heads", "head_dim")


def qkv(rng: np.random.Generator, batch: int, sq: int, sk: int, heads: int, kv_heads: int, d: int):
    """q [batch, sq, heads, d], k and v [batch, sk, kv_heads, d] with attention-like statistics:
    N(0, 1) elements; a quarter of the query heads peaky (q scaled by 4-8), one of them scaled
    so that its largest logit is exactly 100 (``exp`` overflows float32 without max
    subtraction); the first key of every sequence a large-norm "attention sink" (x4, Xiao et
    al. 2023, arXiv:2309.17453)."""
    q = rng.standard_normal((batch, sq, heads, d))
    peaky = rng.random(heads) < 0.25
    if heads:
        peaky[rng.integers(heads)] = True
    q[:, :, peaky] *= rng.uniform(4.0, 8.0, size=int(peaky.sum()))[:, None]
    k = rng.standard_normal((batch, sk, kv_heads, d))
    if sk:
        k[:, 0] *= 4.0
    v = rng.standard_normal((batch, sk, kv_heads, d)) * np.exp(rng.normal(0.0, 0.3, size=(1, 1, kv_heads, 1)))
    if heads and sk and sq:
        # one peaky head is scaled so that its largest logit against the sink key is exactly
        # 100: exp(100) overflows float32, at every size, so max subtraction is required
        h0 = int(np.flatnonzero(peaky)[0])
        logits = np.einsum("bsd,bd->bs", q[:, :, h0], k[:, 0, h0 // (heads // kv_heads)]) / np.sqrt(d)
        m = logits.flat[int(np.argmax(np.abs(logits)))]
        if m != 0:
            q[:, :, h0] *= 100.0 / m
    return q, k, v


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded inputs (see :func:`qkv`).

    Returns:
        ``{"q": [B, S, H, D], "k", "v": [B, S, KVH, D]}``, float32, C-contiguous.
    """
    b, s, h, kvh, d = (int(shape[a]) for a in AXES)
    q, k, v = qkv(np.random.default_rng(seed), b, s, s, h, kvh, d)
    return f32(q=q, k=k, v=v)


def attend64(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, offset: int = 0) -> np.ndarray:
    """Float64 attention: q [B, Sq, H, D], k/v [B, Sk, KVH, D] -> [B, Sq, H, D]; query ``i``
    sits at position ``offset + i`` (causal masking hides keys after it)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    B, Sq, H, D = q.shape
    Sk, KVH = k.shape[1], k.shape[2]
    G = H // KVH
    kk = np.repeat(k, G, axis=2).transpose(0, 2, 3, 1)  # [B, H, D, Sk]
    vv = np.repeat(v, G, axis=2).transpose(0, 2, 1, 3)  # [B, H, Sk, D]
    s = (q.transpose(0, 2, 1, 3) @ kk) * D**-0.5  # [B, H, Sq, Sk]
    if causal:
        mask = np.arange(Sk)[None, :] > (offset + np.arange(Sq))[:, None]
        s = np.where(mask, -np.inf, s)
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return (p @ vv).transpose(0, 2, 1, 3)


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"o": float64 [B, S, H, D]}``."""
    return {"o": attend64(inputs["q"], inputs["k"], inputs["v"], float(attrs.get("causal", 1.0)) == 1.0)}


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    return {"o": (int(shape["batch"]), int(shape["seq"]), int(shape["heads"]), int(shape["head_dim"]))}


def flops(shape: Shape) -> float:
    """``4 B H D`` FLOP per (query, key) pair that is not masked (QK^T and PV, 2 each):
    ``S^2`` pairs per head, ``S (S + 1) / 2`` when causal is assumed. Counted causal (the
    smaller figure) so the roofline check never over-credits a bidirectional kernel."""
    b, s, h, d = shape["batch"], shape["seq"], shape["heads"], shape["head_dim"]
    return 4.0 * b * h * d * s * (s + 1) / 2.0


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read q, k, v and write o once, 4 bytes each."""
    b, s, h, kvh, d = (shape[a] for a in AXES)
    return 4.0 * b * s * d * (2 * h + 2 * kvh)


def _s(b: int, s: int, h: int, kvh: int, d: int) -> Shape:
    return {"batch": b, "seq": s, "heads": h, "kv_heads": kvh, "head_dim": d}


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: batched matmuls per KV head group (no K/V repeat)."""
    q, k, v = i["q"], i["k"], i["v"]
    B, S, H, D = q.shape
    KVH = k.shape[2]
    G = H // KVH
    # [B, KVH, G*S, D] x [B, KVH, D, S]: the G query heads of a group share K and V (no repeat)
    qg = q.reshape(B, S, KVH, G, D).transpose(0, 2, 3, 1, 4).reshape(B, KVH, G * S, D)
    sc = np.matmul(qg, k.transpose(0, 2, 3, 1)) * np.float32(D**-0.5)
    if float(a.get("causal", 1.0)) == 1.0:
        mask = np.triu(np.ones((S, S), dtype=bool), 1)
        sc.reshape(B, KVH, G, S, S)[..., mask] = -np.inf
    softmax_rows_(sc)
    out = np.matmul(sc, v.transpose(0, 2, 1, 3))  # [B, KVH, G*S, D]
    o["o"][...] = out.reshape(B, KVH, G, S, D).transpose(0, 3, 1, 2, 4).reshape(B, S, H, D)


# template.c
CPU_SPACE = DesignSpace(
    parameters=(
        Parameter("BQ", (1, 2, 4, 8)),
        Parameter("BK", (16, 32, 64, 128)),
        Parameter("SCHEDULE", (0, 1)),
    ),
    restrictions=(),
)


ATTENTION = Workload(
    name="attention",
    c_signature=("void attention(const float *q, const float *k, const float *v, float *o, int batch, int seq, "
                 "int heads, int kv_heads, int head_dim, float causal)"),
    args=(Arg("q", "in"), Arg("k", "in"), Arg("v", "in"), Arg("o", "out"),
          *(Arg(a, "int") for a in AXES), Arg("causal", "float")),
    attrs={"causal": 1.0},
    shape_sets={
        "llama3-8b-prefill": (_s(1, 512, 32, 8, 128),),
        "minilm-l6": (_s(1, 16, 12, 12, 32), _s(32, 16, 12, 12, 32)),
        "test-small": (_s(1, 64, 4, 2, 16), _s(2, 16, 4, 2, 16)),
        "test-small-bidir": (_s(1, 64, 4, 4, 16), _s(2, 16, 4, 4, 16)),
    },
    shape_set_attrs={"minilm-l6": {"causal": 0.0}, "test-small-bidir": {"causal": 0.0}},
    validation_shapes={
        "llama3-8b-prefill": (_s(1, 133, 32, 8, 128),),
        "minilm-l6": (_s(3, 13, 12, 12, 32),),
        "test-small": (_s(2, 37, 4, 2, 13), _s(1, 5, 6, 3, 16)),
        "test-small-bidir": (_s(2, 37, 4, 4, 13), _s(1, 5, 6, 3, 16)),
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
    shape_of=lambda i: {**dict(zip(("batch", "seq", "heads", "head_dim"), map(int, i["q"].shape))),
                          "kv_heads": int(i["k"].shape[2])},
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = ATTENTION
