"""GEMM in the Linear-layer convention: ``C = A @ B^T``, float32.

Inputs ``A`` [M, K] (activations) and ``B`` [N, K] (weights, one row per output feature);
output ``C`` [M, N]; all float32, row-major. This is FlashInfer Trace's ``gemm`` definition
(``C = torch.matmul(A, B.T)``, ``definitions/gemm/gemm_n6144_k4096.json``) and PyTorch's
``F.linear(A, B)``. Reference in float64.

Shape sets are Llama-3-8B's projections (hidden 4096, 32 query / 8 key-value heads of 128,
MLP 14336; ``config.json`` of meta-llama/Meta-Llama-3-8B), one projection per set so that an
evaluation stays affordable on a CPU:

======================  =====  =====  =========================================
set                     N      K      what
======================  =====  =====  =========================================
llama3-8b-o-decode      4096   4096   attention output projection
llama3-8b-qkv-decode    6144   4096   fused q/k/v projection (4096 + 2 * 1024)
llama3-8b-gate-decode   14336  4096   MLP gate projection (up_proj has the same shape)
llama3-8b-down-decode   4096   14336  MLP down projection
llama3-8b-o-prefill     4096   4096   o_proj on a prefill chunk
square-1024             1024   1024   classic square benchmark
test-small              64     128    unit tests
======================  =====  =====  =========================================

Serving engines fuse gate_proj and up_proj into one N = 28672 GEMM (a 470 MB weight); the
shape sets time the MLP's first projection unfused, as gate_proj (up_proj is identical in
shape and cost).

The gate and down sets move 235 MB of weights per input set: one evaluation of the default
template point takes 14-15 s on a 2-core AMD EPYC (20-28 s while the sandbox child saved
every input for the parent to compare; 45-75 s on an earlier host), so run them with
``timeout_s`` (``EVAL_TIMEOUT_S``) of 120 s or more for slower candidates.

M (tokens in the batch) comes from FlashInfer Trace's workloads captured in real
Llama-3.1-8B serving (``workloads/gemm/gemm_n{4096,6144}_k4096.jsonl``: M = 1, 2, 4, 7, 8,
15, 16, 24, ..., 256, 972, 2053, 2379, 8192): decode sets use M = 1, 16, 64, prefill uses
M = 972, and the odd validation shapes use the trace's ragged M = 7 and 35 (decode) or 35
and 2053 (prefill, square) with N and K that are not multiples of any tile (N = 263,
K = the real K + 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import row_errors
from kernels.workloads.base import Arg, Arrays, Shape, Workload

# Row-normalised error bound (see ERROR_DEFINITION). Measured float32 errors at K = 4096 and
# 14336: blocked BLAS ~4e-7, one sequential float32 accumulator ~3e-6 / 5.5e-6. 2e-5 keeps a
# >3x margin over the worst reasonable float32 summation while dropping a single k term
# (~1e-2 at K = 14336) or rounding inputs to fp16/bf16 (~4e-4) fails.
TOLERANCE = 2e-5
REL_FLOOR = 1e-12

ERROR_DEFINITION = (
    "max_abs_error = max |C - ref|; max_rel_error = max over rows m of "
    "max_n |C[m, n] - ref[m, n]| / max_n |ref[m, n]| (error relative to the row's largest "
    f"output, robust to outputs near zero from cancellation); pass iff max_rel_error <= {TOLERANCE:g}"
)


def uniform_fast(rng: np.random.Generator, size: int, bound: float) -> np.ndarray:
    """``size`` float32 values uniform in [-bound, bound), built from raw random bits.

    2-3x faster than ``rng.random`` for the 10^8-element weight matrices of the large
    projections (23 mantissa bits per value: plenty for test data).
    """
    bits = rng.integers(0, 2**32, size=size, dtype=np.uint32)
    bits >>= np.uint32(9)
    bits |= np.uint32(0x3F800000)  # [1, 2)
    out = bits.view(np.float32)
    out -= np.float32(1.5)  # [-0.5, 0.5)
    out *= np.float32(2.0 * bound)
    return out


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded inputs with LLM-like statistics.

    ``A`` (activations): N(0, 1) times a log-normal per-row (token) scale, plus a few outlier
    feature channels (about 1 in 1000, at least one) of magnitude 10-60 with a fixed sign per
    channel (Dettmers et al. 2022, "LLM.int8()", arXiv:2208.07339).
    ``B`` (weights): PyTorch's ``nn.Linear`` default initialisation, uniform in
    [-1/sqrt(K), 1/sqrt(K)) (kaiming-uniform with a = sqrt(5)), times a log-normal per-row
    (output feature) scale.

    Returns:
        ``{"A": float32 [M, K], "B": float32 [N, K]}``, C-contiguous.
    """
    M, N, K = int(shape["M"]), int(shape["N"]), int(shape["K"])
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K), dtype=np.float32)
    A *= np.exp(rng.normal(0.0, 0.3, size=(M, 1))).astype(np.float32)
    n_out = max(1, K // 1000)
    channels = rng.choice(K, size=n_out, replace=False)
    signs = rng.choice([-1.0, 1.0], size=n_out)
    A[:, channels] = (rng.uniform(10.0, 60.0, size=(M, n_out)) * signs).astype(np.float32)
    B = uniform_fast(rng, N * K, 1.0 / np.sqrt(K)).reshape(N, K)
    B *= np.exp(rng.normal(0.0, 0.2, size=(N, 1))).astype(np.float32)
    return {"A": np.ascontiguousarray(A), "B": np.ascontiguousarray(B)}


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"C": float64 [M, N]}`` = ``A @ B^T``."""
    A = inputs["A"].astype(np.float64)
    B = inputs["B"].astype(np.float64)
    return {"C": A @ B.T}


def salted_reference(inputs: Arrays, ref: Arrays, swaps: Mapping[str, list[int]],
                     attrs: Mapping[str, float]) -> Arrays:
    """:func:`reference` of ``inputs`` from ``ref``, the reference before values of ``A`` and/or
    ``B`` were swapped (``swaps``: ``{"A" or "B": [i, j]}``, two flat indices, as the timing
    loop swaps them within one row before every call). ``C[m, n] = A[m] . B[n]``: a swap in
    rows of A changes only those rows of C, one in rows of B only those columns; they are
    recomputed in float64 (O((M + N) K) instead of O(MNK)), the rest is ``ref``'s.
    Returns ``{"C": float64 [M, N]}`` (a new array)."""
    A, B = inputs["A"], inputs["B"]
    C = np.array(ref["C"], dtype=np.float64, copy=True)
    K = A.shape[1]
    if K:
        for m in sorted({int(v) // K for v in swaps.get("A", ())}):
            C[m, :] = B.astype(np.float64) @ A[m].astype(np.float64)
        for n in sorted({int(v) // K for v in swaps.get("B", ())}):
            C[:, n] = A.astype(np.float64) @ B[n].astype(np.float64)
    return {"C": C}


def errors(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """``(max_abs_error, max_rel_error)`` as in :data:`ERROR_DEFINITION`."""
    return row_errors(out, ref, REL_FLOOR)


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    return {"C": (int(shape["M"]), int(shape["N"]))}


def flops(shape: Shape) -> float:
    """``2 * M * N * K``: one multiply and one add per term of each dot product."""
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read A and B once, write C once, 4 bytes each:
    ``4 * (M*K + N*K + M*N)``."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    return 4.0 * (M * K + N * K + M * N)


def _decode(n: int, k: int) -> tuple[Shape, ...]:
    return tuple({"M": m, "N": n, "K": k} for m in (1, 16, 64))


def _odd(k: int, ms: tuple[int, ...] = (7, 35)) -> tuple[Shape, ...]:
    """Ragged M from the trace, prime N = 263, K = real K + 3: no tile divides them."""
    return tuple({"M": m, "N": 263, "K": k + 3} for m in ms)


def numpy_gemm(A: np.ndarray, B: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``A @ B^T`` with ``numpy.matmul`` (BLAS): A [M, K], B [N, K] -> [M, N] float32."""
    return np.matmul(A, B.T, out=out)


def numpy_baseline(inputs: Arrays, attrs: Mapping[str, float], out: dict) -> np.ndarray:
    """The NumPy baseline (:attr:`Workload.numpy_baseline`): :func:`numpy_gemm` into a
    preallocated ``out["C"]``."""
    A, B = inputs["A"], inputs["B"]
    return numpy_gemm(A, B, out=out.setdefault("C", np.empty((A.shape[0], B.shape[0]), np.float32)))


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: ``numpy.matmul`` (BLAS) into ``C``."""
    np.matmul(i["A"], i["B"].T, out=o["C"])


# The register and cache tiling of template.c, shared with gemm_bias's (same blocking code).
CPU_TILING = (
    Parameter("MR", (1, 2, 4, 6, 8)),
    Parameter("NR", (1, 2, 4, 8)),
    Parameter("NV", (1, 2, 3, 4)),
    Parameter("VEC", (4, 8, 16)),
    Parameter("KC", (64, 128, 256, 512, 1024)),
    Parameter("NC", (32, 64, 96, 128, 192, 256)),
    Parameter("MC", (16, 32, 48, 64, 96, 128, 192, 256)),
    Parameter("PACK_MIN_M", (1, 8, 32, 128, 1073741824)),
    Parameter("LOOP_ORDER", (0, 1)),
    Parameter("SCHEDULE", (0, 1)),
)
CPU_TILING_RESTRICTIONS = ("KC % VEC == 0", "MR * NR <= 24", "MR * NV <= 24", "MC % MR == 0", "NC % (NV * VEC) == 0")

# template.c: dot-product path (MR x NR) below PACK_MIN_M, packed outer-product path
# (MR x NV*VEC) from it; 1073741824 = never pack. Accumulator tiles must fit the 32
# vector registers of AVX-512 (AVX2 has 16: larger tiles spill there and time slower);
# blocks hold whole register tiles.
CPU_SPACE = DesignSpace(
    parameters=(*CPU_TILING, Parameter("REG_PIN", (0, 1))),
    restrictions=CPU_TILING_RESTRICTIONS,
)
# template.cu
CUDA_SPACE = DesignSpace(
    parameters=(
        Parameter("BLOCK_M", (16, 32, 64, 128)),
        Parameter("BLOCK_N", (16, 32, 64, 128)),
        Parameter("BLOCK_K", (8, 16, 32)),
        Parameter("THREAD_M", (1, 2, 4, 8)),
        Parameter("THREAD_N", (1, 2, 4, 8)),
        Parameter("VEC", (1, 4)),
        Parameter("SMEM_PAD", (0, 1)),
        Parameter("USE_SMEM", (0, 1)),
        Parameter("SPLIT_K", (1, 2, 4, 8)),
    ),
    restrictions=(
        "THREAD_M <= BLOCK_M and THREAD_N <= BLOCK_N",
        "32 <= (BLOCK_M // THREAD_M) * (BLOCK_N // THREAD_N) <= 1024",
        "BLOCK_K * (BLOCK_M + BLOCK_N + 2 * SMEM_PAD) * 4 <= 49152",
        "THREAD_M * THREAD_N <= 64",
        # without shared memory the staging knobs do nothing: keep one value each
        "USE_SMEM == 1 or (VEC == 1 and SMEM_PAD == 0 and BLOCK_K == 8)",
    ),
)


def launch_plan(params: Mapping[str, Any]) -> dict[str, Any]:
    """Launch plan of template.cu at ``params``: ``gemm_kernel`` on a 2D grid of output
    tiles; with ``SPLIT_K > 1`` a third grid axis over K slices writing float32 scratch
    ``partial`` [SPLIT_K, M, N], then ``gemm_splitk_reduce`` summing it into C."""
    threads = "(BLOCK_M // THREAD_M) * (BLOCK_N // THREAD_N)"
    grid_xy = ["(N + BLOCK_N - 1) // BLOCK_N", "(M + BLOCK_M - 1) // BLOCK_M"]
    # k per split, rounded up to whole BLOCK_K slices (keeps float4 loads aligned)
    k_chunk = "max(((K + SPLIT_K - 1) // SPLIT_K + BLOCK_K - 1) // BLOCK_K * BLOCK_K, BLOCK_K)"
    if int(params.get("SPLIT_K", 1)) <= 1:
        return {"launches": [{
            "kernel": "gemm_kernel", "grid": [*grid_xy, "1"], "block": [threads],
            "args": ["A", "B", "C", "M", "N", "K", k_chunk],
        }]}
    return {
        "launches": [
            {"kernel": "gemm_kernel", "grid": [*grid_xy, "SPLIT_K"], "block": [threads],
             "args": ["A", "B", "partial", "M", "N", "K", k_chunk]},
            {"kernel": "gemm_splitk_reduce", "grid": ["(M * N + 255) // 256"], "block": ["256"],
             "args": ["partial", "C", "M * N", "SPLIT_K"]},
        ],
        "scratch": {"partial": "SPLIT_K * M * N"},
    }


GEMM = Workload(
    name="gemm",
    c_signature="void gemm(const float *A, const float *B, float *C, int M, int N, int K)",
    args=(
        Arg("A", "in"),
        Arg("B", "in"),
        Arg("C", "out"),
        Arg("M", "int"),
        Arg("N", "int"),
        Arg("K", "int"),
    ),
    attrs={},
    shape_sets={
        "llama3-8b-o-decode": _decode(4096, 4096),
        "llama3-8b-qkv-decode": _decode(6144, 4096),
        "llama3-8b-gate-decode": _decode(14336, 4096),
        "llama3-8b-down-decode": _decode(4096, 14336),
        "llama3-8b-o-prefill": ({"M": 972, "N": 4096, "K": 4096},),
        "square-1024": ({"M": 1024, "N": 1024, "K": 1024},),
        "test-small": ({"M": 1, "N": 64, "K": 128}, {"M": 16, "N": 64, "K": 128}),
    },
    validation_shapes={
        "llama3-8b-o-decode": _odd(4096),
        "llama3-8b-qkv-decode": _odd(4096),
        "llama3-8b-gate-decode": _odd(4096),
        "llama3-8b-down-decode": _odd(14336),
        "llama3-8b-o-prefill": _odd(4096, (35, 2053)),
        "square-1024": _odd(1024, (35, 2053)),
        "test-small": ({"M": 7, "N": 37, "K": 133}, {"M": 35, "N": 37, "K": 133}),
    },
    generate=generate,
    reference=reference,
    output_shapes=output_shapes,
    errors=errors,
    tolerance=TOLERANCE,
    flops=flops,
    bytes=nbytes,
    error_definition=ERROR_DEFINITION,
    salted_reference=salted_reference,
    spaces={"cpu": CPU_SPACE, "cuda": CUDA_SPACE},
    launch_plan=launch_plan,
    numpy_baseline=numpy_baseline,
    # FlashInfer Trace definitions of this math (definitions/gemm/*.json)
    flashinfer={"gemm_n4096_k4096": {"M": "M", "N": "N", "K": "K"},
                "gemm_n6144_k4096": {"M": "M", "N": "N", "K": "K"}},
    shape_of=lambda i: {"M": int(i["A"].shape[0]), "N": int(i["B"].shape[0]), "K": int(i["A"].shape[1])},
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = GEMM
