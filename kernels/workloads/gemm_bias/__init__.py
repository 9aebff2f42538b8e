"""GEMM with bias and an optional activation epilogue: ``C = act(A @ B^T + bias)``, float32.

Inputs ``A`` [M, K] (activations), ``B`` [N, K] (weights, ``nn.Linear`` layout), ``bias``
[N]; output ``C`` [M, N]; all float32, row-major. ``act`` is a workload attribute passed as
a C float: ``0`` identity (``F.linear(A, B, bias)``), ``1`` exact GELU
(``F.gelu(F.linear(A, B, bias))``, erf form). The activation belongs to the model, so it is
set per shape set (``shape_set_attrs``): MiniLM's FFN up-projection uses ``act = 1``, the
bias + GELU fused into the GEMM's epilogue ("bias + activation in one pass").

Shape sets are all-MiniLM-L6-v2's projections (hidden 384, 12 heads, FFN 1536) with
M = 16 (one sentence) and 512 (a batch of 32 sentences of 16 tokens), and BERT-base's
fused QKV (768 -> 2304).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernels.space import DesignSpace, Parameter
from kernels.workloads._common import activations, f32, gelu64, gelu_, row_error_definition, row_errors
from kernels.workloads.base import Arg, Arrays, Shape, Workload
from kernels.workloads.gemm import CPU_TILING, CPU_TILING_RESTRICTIONS

# As gemm's bound (float32 accumulation over K up to 1536: ~1e-6; dropping a k term or
# rounding to bf16 fails), also well under the GELU epilogue's float32 error (~3e-7).
TOLERANCE = 2e-5
ERROR_DEFINITION = row_error_definition(TOLERANCE) + "; act = 1 applies exact (erf) GELU after the bias"


def generate(shape: Shape, seed: int) -> Arrays:
    """Seeded inputs: ``A`` LLM-like activations (outlier channels), ``B`` ``nn.Linear``'s
    default initialisation U(-1/sqrt(K), 1/sqrt(K)) times a log-normal per-row scale,
    ``bias`` U(-1/sqrt(K), 1/sqrt(K)) * 4 (trained biases are larger than their init).

    Returns:
        ``{"A": [M, K], "B": [N, K], "bias": [N]}``, float32, C-contiguous.
    """
    M, N, K = int(shape["M"]), int(shape["N"]), int(shape["K"])
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(max(K, 1))
    B = rng.uniform(-bound, bound, size=(N, K)) * np.exp(rng.normal(0.0, 0.2, size=(N, 1)))
    return f32(A=activations(rng, M, K), B=B, bias=4.0 * rng.uniform(-bound, bound, size=N))


def reference(inputs: Arrays, attrs: Mapping[str, float]) -> Arrays:
    """Float64 reference: ``{"C": float64 [M, N]}`` = ``act(A @ B^T + bias)``."""
    C = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64).T + inputs["bias"].astype(np.float64)
    return {"C": gelu64(C) if float(attrs.get("act", 0.0)) == 1.0 else C}


def output_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    return {"C": (int(shape["M"]), int(shape["N"]))}


def flops(shape: Shape) -> float:
    """``2 M N K`` for the products plus ``M N`` for the bias (the activation's FLOPs are
    not counted)."""
    return 2.0 * shape["M"] * shape["N"] * shape["K"] + shape["M"] * shape["N"]


def nbytes(shape: Shape) -> float:
    """Compulsory DRAM traffic: read A, B and bias once, write C once, 4 bytes each."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    return 4.0 * (M * K + N * K + N + M * N)


def _sizes(n: int, k: int) -> tuple[Shape, ...]:
    return tuple({"M": m, "N": n, "K": k} for m in (16, 512))


def _odd(k: int) -> tuple[Shape, ...]:
    return ({"M": 7, "N": 263, "K": k + 3}, {"M": 35, "N": 263, "K": k + 3})


def numpy_into(i: Arrays, o: dict, s: Shape, a: Mapping[str, float]) -> None:
    """:attr:`Workload.numpy_into`: ``numpy.matmul`` (BLAS), the bias, and GELU when ``act`` is 1."""
    C = o["C"]
    np.matmul(i["A"], i["B"].T, out=C)
    C += i["bias"]
    if float(a.get("act", 0.0)) == 1.0:
        gelu_(C)


# template.c: gemm's space plus the erf of the GELU epilogue.
CPU_SPACE = DesignSpace(
    parameters=(*CPU_TILING, Parameter("ERF_IMPL", (0, 1))),
    restrictions=CPU_TILING_RESTRICTIONS,
)


GEMM_BIAS = Workload(
    name="gemm_bias",
    c_signature="void gemm_bias(const float *A, const float *B, const float *bias, float *C, int M, int N, int K, float act)",
    args=(Arg("A", "in"), Arg("B", "in"), Arg("bias", "in"), Arg("C", "out"),
          Arg("M", "int"), Arg("N", "int"), Arg("K", "int"), Arg("act", "float")),
    attrs={"act": 0.0},
    shape_sets={
        "minilm-l6-qkv": _sizes(1152, 384),
        "minilm-l6-o": _sizes(384, 384),
        "minilm-l6-ffn-up": _sizes(1536, 384),
        "minilm-l6-ffn-down": _sizes(384, 1536),
        "bert-base-qkv": _sizes(2304, 768),
        "test-small": ({"M": 1, "N": 64, "K": 128}, {"M": 16, "N": 64, "K": 128}),
        "test-small-gelu": ({"M": 1, "N": 64, "K": 128}, {"M": 16, "N": 64, "K": 128}),
    },
    shape_set_attrs={"minilm-l6-ffn-up": {"act": 1.0}, "test-small-gelu": {"act": 1.0}},
    validation_shapes={
        "minilm-l6-qkv": _odd(384),
        "minilm-l6-o": _odd(384),
        "minilm-l6-ffn-up": _odd(384),
        "minilm-l6-ffn-down": _odd(1536),
        "bert-base-qkv": _odd(768),
        "test-small": ({"M": 7, "N": 37, "K": 133}, {"M": 35, "N": 37, "K": 133}),
        "test-small-gelu": ({"M": 7, "N": 37, "K": 133}, {"M": 35, "N": 37, "K": 133}),
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
    shape_of=lambda i: {"M": int(i["A"].shape[0]), "N": int(i["B"].shape[0]), "K": int(i["A"].shape[1])},
    numpy_into=numpy_into,
)

#: The workload of this folder (found by :mod:`kernels.workloads.registry`).
WORKLOAD = GEMM_BIAS
