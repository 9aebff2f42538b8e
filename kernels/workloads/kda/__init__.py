"""Kimi Delta Attention (KDA) forward, float32: the linear-attention layer of Kimi Linear.

Per sequence-head ``h`` (one of ``batch_heads`` independent problems), tokens
``t = 0..seq-1``, state ``S`` [dk, dv] starting at zero (Kimi Linear, arXiv:2510.26692,
Sec. 3, Eq. (1); step order of fla-org/flash-linear-attention ``fla/ops/kda``):

    S'_t = Diag(exp(g_t)) S_{t-1}                   per-channel decay, g_t <= 0
    S_t  = S'_t + beta_t k_t (v_t - S'_t^T k_t)^T   delta rule on the decayed state
    o_t  = S_t^T (scale * q_t),  scale = dk ** -0.5

Inputs (float32, row-major, heads-first so that each sequence-head is contiguous):
``q``, ``k``, ``g`` [batch_heads, seq, dk]; ``v`` [batch_heads, seq, dv];
``beta`` [batch_heads, seq]. Outputs: ``o`` [batch_heads, seq, dv] and ``state``
[batch_heads, dk, dv], the state after the last token ("K-first" as in FLA; what a serving
engine keeps for the following decode steps). ``batch_heads`` = batch x value heads (the
FLA layout [B, T, H, D] transposed to [B*H, T, D]); q/k are given already L2-normalised
(the kernel does not normalise them), ``g`` in log space, ``beta`` already sigmoid-ed.

Any correct algorithm is allowed (token-by-token recurrence, the chunked WY/UT form of the
paper's Sec. 3.1, ...). :func:`reference` is the token-by-token form (:func:`recurrent`)
in float64, the fastest in NumPy; :func:`chunked` is the chunked form with a per-chunk
dense solve; the test suite checks the two against each other (within 1e-10) and against
the independent ``../shared/reference/kda_reference.py``.

Shapes: Kimi-Linear-48B-A3B has 32 KDA heads with dk = dv = 128
(moonshotai/Kimi-Linear-48B-A3B-Instruct ``config.json``). ``kimi-linear`` times 4 heads
(one tensor-parallel rank of 8) on a 512- and a 2048-token prompt, and all 32 heads on a
256-token prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import batched_salted_reference
from kernels.workloads.base import Arg, Arrays, Shape, Workload

CHUNK = 64  # chunk length of the reference and of the paper's FLOP model (FLA's default)
GATE_LOWER_BOUND = -5.0
# Head-normalised error bound (see ERROR_DEFINITION). A float32 token-by-token recurrence
# measures ~1e-6 on these inputs (the state is a long sum of decayed rank-1 updates);
# 1e-4 is FLA's fp32 self-test bound and leaves a ~100x margin for other summation orders
# (chunked, tensor-core friendly). Ignoring beta, the decay or the delta rule's prediction
# is off by >1e-1. Normalising per token instead would divide by outputs near zero: the
# first token's output is scale * (q_0 . k_0) beta_0 v_0, tiny when q_0 and k_0 are nearly
# orthogonal (measured 1e-5 of a typical token), so float32 rounding alone reached 1e-4.
TOLERANCE = 1e-4
REL_FLOOR = 1e-30

ERROR_DEFINITION = (
    "per output (o and state): max_abs_error = max |out - ref|; max_rel_error = max over "
    "sequence-heads h of max |out[h] - ref[h]| / max |ref[h]| (error relative to the head's "
    "largest output over all its tokens, resp. its largest state entry); the worst output "
    f"counts; pass iff max_rel_error <= {TOLERANCE:g}"
)


def _l2norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded inputs with the value ranges KDA sees in Kimi Linear.

    ``q``, ``k``: L2-normalised Gaussian rows (FLA's in-kernel l2norm, eps 1e-6).
    ``v``: N(0, 1). ``beta = sigmoid(N(0, 1))`` in (0, 1). ``g``: Kimi Linear's
    lower-bounded gate, ``g = -5 * sigmoid(f + b)`` with ``f ~ N(0, 1)`` per token and a
    per-head, per-channel bias ``b ~ U(-8, 2)``: channels range from long memory
    (``g ~ -0.002``) to fast forgetting (``g ~ -4.5``), so ``exp`` of an in-chunk cumulative
    gate underflows float32 in chunked kernels that do not work with differences.

    Returns:
        ``{"q", "k", "g": [BH, T, dk], "v": [BH, T, dv], "beta": [BH, T]}``, float32,
        C-contiguous.
    """
    bh, t, dk, dv = (int(shape[a]) for a in ("batch_heads", "seq", "dk", "dv"))
    rng = np.random.default_rng(seed)
    q = _l2norm(rng.standard_normal((bh, t, dk)))
    k = _l2norm(rng.standard_normal((bh, t, dk)))
    v = rng.standard_normal((bh, t, dv))
    bias = rng.uniform(-8.0, 2.0, size=(bh, 1, dk))
    g = GATE_LOWER_BOUND * _sigmoid(rng.standard_normal((bh, t, dk)) + bias)
    beta = _sigmoid(rng.standard_normal((bh, t)))
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    return {"q": f32(q), "k": f32(k), "v": f32(v), "g": f32(g), "beta": f32(beta)}


def recurrent(q, k, v, g, beta, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Token-by-token KDA in float64 (Eq. (1)), heads-first layout.

    Args:
        q, k, g: [BH, T, dk]; v: [BH, T, dv]; beta: [BH, T] (any float dtype).
        scale: default ``dk ** -0.5``.

    Returns:
        ``(o [BH, T, dv], state [BH, dk, dv])``, float64.
    """
    q, k, v, g, beta = (np.asarray(a, dtype=np.float64) for a in (q, k, v, g, beta))
    bh, t, dk = q.shape
    dv = v.shape[-1]
    scale = dk**-0.5 if scale is None else scale
    S = np.zeros((bh, dk, dv))
    o = np.empty((bh, t, dv))
    for i in range(t):
        S *= np.exp(g[:, i])[:, :, None]
        pred = np.einsum("bk,bkv->bv", k[:, i], S)
        S += k[:, i, :, None] * (beta[:, i, None] * (v[:, i] - pred))[:, None, :]
        o[:, i] = np.einsum("bk,bkv->bv", q[:, i] * scale, S)
    return o, S


def chunked(q, k, v, g, beta, scale: float | None = None, chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """Chunked (WY/UT) KDA in float64, heads-first layout (Kimi Linear Sec. 3.1).

    Within a chunk of ``c`` tokens with chunk-initial state ``S`` and in-chunk cumulative
    log decay ``G_r = g_1 + ... + g_r``:
    ``A_kk[i, j] = sum_d k_i k_j exp(G_i - G_j)`` (j < i),
    ``A_qk[i, j] = scale * sum_d q_i k_j exp(G_i - G_j)`` (j <= i),
    ``(I + Diag(beta) A_kk) [U | W] = Diag(beta) [V | exp(G) K]`` (dense solve),
    ``U~ = U - W S``, ``O = scale (Q * exp(G)) S + A_qk U~``,
    ``S <- exp(G_c) * S + (exp(G_c - G) * K)^T U~``. Every exponent is <= 0 (no overflow).
    The last chunk is simply shorter (no padding).

    Returns:
        ``(o [BH, T, dv], state [BH, dk, dv])``, float64.
    """
    q, k, v, g, beta = (np.asarray(a, dtype=np.float64) for a in (q, k, v, g, beta))
    bh, t, dk = q.shape
    dv = v.shape[-1]
    scale = dk**-0.5 if scale is None else scale
    S = np.zeros((bh, dk, dv))
    o = np.empty((bh, t, dv))
    for t0 in range(0, t, chunk):
        sl = slice(t0, min(t0 + chunk, t))
        Q, K, V, B = q[:, sl] * scale, k[:, sl], v[:, sl], beta[:, sl]
        c = K.shape[1]
        G = np.cumsum(g[:, sl], axis=1)  # [BH, c, dk]
        lower = np.tril(np.ones((c, c), dtype=bool))
        D = np.where(lower[None, :, :, None], G[:, :, None, :] - G[:, None, :, :], -np.inf)
        E = np.exp(D)  # exp(G_i - G_j) for j <= i, else 0
        Akk = np.einsum("bid,bjd,bijd->bij", K, K, E) * np.tril(np.ones((c, c)), -1)
        Aqk = np.einsum("bid,bjd,bijd->bij", Q, K, E)
        T = np.eye(c) + B[:, :, None] * Akk
        rhs = B[:, :, None] * np.concatenate([V, np.exp(G) * K], axis=-1)
        X = np.linalg.solve(T, rhs)
        U, W = X[..., :dv], X[..., dv:]
        Ut = U - W @ S
        o[:, sl] = (Q * np.exp(G)) @ S + Aqk @ Ut
        Gc = G[:, -1]  # [BH, dk]
        S = np.exp(Gc)[:, :, None] * S + np.swapaxes(np.exp(Gc[:, None, :] - G) * K, 1, 2) @ Ut
    return o, S


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference (:func:`recurrent`): ``{"o": [BH, T, dv], "state": [BH, dk, dv]}``."""
    o, S = recurrent(inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"])
    return {"o": o, "state": S}


def errors(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """``(max_abs_error, max_rel_error)`` as in :data:`ERROR_DEFINITION`; the first axis of
    ``out`` / ``ref`` is the sequence-head."""
    if out.size == 0:
        return 0.0, 0.0
    heads = out.shape[0]
    diff = np.abs(out.astype(np.float64) - ref).reshape(heads, -1)
    denom = np.maximum(np.max(np.abs(ref).reshape(heads, -1), axis=1), REL_FLOOR)
    return float(np.max(diff)), float(np.max(np.max(diff, axis=1) / denom))


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    bh, t, dk, dv = (int(shape[a]) for a in ("batch_heads", "seq", "dk", "dv"))
    return {"o": (bh, t, dv), "state": (bh, dk, dv)}


def flops(shape: Shape) -> float:
    """Kimi Linear's FLOP model of the chunked forward (arXiv:2510.26692, Sec. 6.3,
    Eq. (13)), per head ``6 T d^2 + 3 T C d + T C^2`` with chunk ``C = 64``, generalised to
    ``dk != dv`` as ``6 T dk dv + 1.5 T C (dk + dv) + T C^2``, times ``batch_heads``."""
    bh, t, dk, dv = (shape[a] for a in ("batch_heads", "seq", "dk", "dv"))
    return float(bh * (6 * t * dk * dv + 1.5 * t * CHUNK * (dk + dv) + t * CHUNK * CHUNK))


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic, 4 bytes per element: read q, k, g (dk each), v (dv) and beta
    per token, write o (dv) per token and the final state (dk x dv) per head."""
    bh, t, dk, dv = (shape[a] for a in ("batch_heads", "seq", "dk", "dv"))
    return 4.0 * bh * (t * (3 * dk + 2 * dv + 1) + dk * dv)


def _shape(bh: int, t: int, dk: int = 128, dv: int = 128) -> Shape:
    return {"batch_heads": bh, "seq": t, "dk": dk, "dv": dv}


def numpy_kda(q, k, v, g, beta) -> tuple[np.ndarray, np.ndarray]:
    """Token-by-token KDA in float32, vectorised over heads (the recurrence above).

    Args: q, k, g [BH, T, dk]; v [BH, T, dv]; beta [BH, T], float32.

    Returns:
        ``(o [BH, T, dv], state [BH, dk, dv])``, float32.
    """
    bh, t, dk = q.shape
    dv = v.shape[-1]
    a = np.exp(g)
    qs = q * np.float32(dk**-0.5)
    S = np.zeros((bh, dk, dv), dtype=np.float32)
    o = np.empty((bh, t, dv), dtype=np.float32)
    for i in range(t):
        S *= a[:, i, :, None]
        pred = np.einsum("bk,bkv->bv", k[:, i], S)
        S += k[:, i, :, None] * (beta[:, i, None] * (v[:, i] - pred))[:, None, :]
        o[:, i] = np.einsum("bk,bkv->bv", qs[:, i], S)
    return o, S


def numpy_baseline(inputs: Arrays, attrs: Mapping[str, float], out: dict) -> tuple[np.ndarray, np.ndarray]:
    """The NumPy baseline (:attr:`Workload.numpy_baseline`): :func:`numpy_kda`."""
    return numpy_kda(inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"])


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: :func:`numpy_kda` (token by token): measured faster in
    NumPy than the chunked form at Kimi Linear's sizes (128-token prompt, 32 heads of 128:
    0.5 s vs 1.3 s), whose [heads, C, C, d] decay tensors dominate."""
    out, state = numpy_kda(i["q"], i["k"], i["v"], i["g"], i["beta"])
    o["o"][...] = out
    o["state"][...] = state


# template.c: DV_BLOCK and FUSE belong to the recurrent algorithm, CHUNK to the chunked one.
CPU_SPACE = DesignSpace(
    parameters=(
        Parameter("ALGO", (0, 1)),
        Parameter("DV_BLOCK", (8, 16, 32, 64, 128)),
        Parameter("FUSE", (0, 1)),
        Parameter("CHUNK", (16, 32, 64)),
        Parameter("ACC_DOUBLE", (0, 1)),
    ),
    restrictions=(
        "ALGO == 1 or CHUNK == 64",
        "ALGO == 0 or (DV_BLOCK == 64 and FUSE == 1)",
    ),
)

# template.cu: rows of the register-resident state, and the head dimension the space is
# sized for (Kimi Linear: dk = dv = 128). Larger dk still run (state in shared memory).
CUDA_REG_DK_MAX = 128
CUDA_DK = 128
SMEM_OPTIN_MAX = 227 * 1024  # sm_90 dynamic shared memory per block (opt-in)

CUDA_SPACE = DesignSpace(
    parameters=(
        Parameter("DV_BLOCK", (4, 8, 16, 32, 64, 128)),
        Parameter("THREADS_PER_COL", (2, 4, 8, 16, 32)),
        Parameter("VEC", (1, 2, 4)),
        Parameter("CHUNK", (8, 16, 32, 64)),
        Parameter("STATE_SMEM", (0, 1)),
        Parameter("ASYNC_COPY", (0, 1)),
        Parameter("FAST_EXP", (0, 1)),
        Parameter("PREP", (0, 1)),
        Parameter("PIPELINE", (0, 1)),
    ),
    restrictions=(
        # at 1024 threads ptxas has 64 registers per thread and spills
        "32 <= DV_BLOCK * THREADS_PER_COL <= 512",
        # prefetched rows (3x the register state of 128 / THREADS_PER_COL floats) must fit
        # the registers a thread may have at this block size, with ~32 to spare
        "PIPELINE == 0 or 512 // THREADS_PER_COL + 32 <= min(255, 65536 // (DV_BLOCK * THREADS_PER_COL))",
        "STATE_SMEM == 0 or PIPELINE == 0",  # only the register state is pipelined
        # both staging buffers plus the state slab at dk = 128 within the opt-in limit
        f"2 * CHUNK * (3 * {CUDA_DK} + DV_BLOCK + 2) * 4 + STATE_SMEM * {CUDA_DK} * DV_BLOCK * 4"
        f" <= {SMEM_OPTIN_MAX}",
    ),
)


def launch_plan(params: Mapping[str, Any]) -> dict[str, Any]:
    """Launch plan of template.cu at ``params``: ``kda_kernel``, one block per (head, DV_BLOCK
    value columns), with two staging buffers in dynamic shared memory (plus the state slab
    with STATE_SMEM or dk beyond the register state); with ``PREP`` first
    ``kda_prep_kernel`` writing the decays and q.k into scratch."""
    align = "max(THREADS_PER_COL * VEC, 4)"
    ld = f"((dk + {align} - 1) // {align} * {align})"  # staged row length, zero-padded
    # two staging buffers; the state slab when STATE_SMEM or dk beyond the register state
    smem = (f"2 * CHUNK * (3 * {ld} + DV_BLOCK + 2) * 4"
            f" + max(STATE_SMEM, dk > {CUDA_REG_DK_MAX}) * {ld} * DV_BLOCK * 4")
    main = {
        "kernel": "kda_kernel",
        "grid": ["batch_heads * ((dv + DV_BLOCK - 1) // DV_BLOCK)"],
        "block": ["DV_BLOCK * THREADS_PER_COL"],
        "shared_mem_bytes": smem,
    }
    sizes = ["batch_heads", "seq", "dk", "dv"]
    if not int(params.get("PREP", 0)):
        return {"launches": [{**main, "args": ["q", "k", "v", "g", "beta", "o", "state", *sizes]}]}
    return {
        "launches": [
            {"kernel": "kda_prep_kernel", "grid": ["(batch_heads * seq + 7) // 8"], "block": ["256"],
             "args": ["q", "k", "g", "decay", "qk", "batch_heads * seq", "dk"]},
            {**main, "args": ["q", "k", "v", "decay", "beta", "qk", "o", "state", *sizes]},
        ],
        "scratch": {"decay": "batch_heads * seq * dk", "qk": "batch_heads * seq"},
    }


KDA = Workload(
    name="kda",
    c_signature=(
        "void kda(const float *q, const float *k, const float *v, const float *g, "
        "const float *beta, float *o, float *state, int batch_heads, int seq, int dk, int dv)"
    ),
    args=(
        Arg("q", "in"),
        Arg("k", "in"),
        Arg("v", "in"),
        Arg("g", "in"),
        Arg("beta", "in"),
        Arg("o", "out"),
        Arg("state", "out"),
        Arg("batch_heads", "int"),
        Arg("seq", "int"),
        Arg("dk", "int"),
        Arg("dv", "int"),
    ),
    attrs={},
    shape_sets={
        "kimi-linear": (_shape(4, 512), _shape(4, 2048), _shape(32, 256)),
        "test-small": (_shape(2, 64, 32, 32), _shape(1, 160, 32, 32)),
    },
    # seq not a multiple of any chunk, odd head dims (test-small), odd head count.
    validation_shapes={
        "kimi-linear": (_shape(3, 333),),
        "test-small": (_shape(3, 37, 19, 13), _shape(1, 133, 33, 17)),
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
    shape_of=lambda i: {"batch_heads": int(i["q"].shape[0]), "seq": int(i["q"].shape[1]),
                      "dk": int(i["q"].shape[2]), "dv": int(i["v"].shape[2])},
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = KDA
