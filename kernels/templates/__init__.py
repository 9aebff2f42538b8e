"""Source templates of candidate kernels and their default design spaces."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernels.space import DesignSpace, Parameter
from kernels.templates.cuda import cuda_space
from kernels.templates.cuda import default_launch_plan as _cuda_launch_plan

_DIR = Path(__file__).resolve().parent
_SUFFIX = {"cpu": ".c", "cuda": ".cu"}

# The register and cache tiling shared by gemm.c and gemm_bias.c (same blocking code).
_GEMM_TILING = (
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
_GEMM_RESTRICTIONS = ("KC % VEC == 0", "MR * NR <= 24", "MR * NV <= 24", "MC % MR == 0", "NC % (NV * VEC) == 0")

_DEFAULT_SPACES = {
    "rmsnorm": DesignSpace(
        parameters=(
            Parameter("ROWS_PER_CHUNK", (1, 2, 4, 8, 16, 32)),
            Parameter("UNROLL", (1, 2, 4, 8)),
            Parameter("VEC", (1, 4, 8, 16)),
            Parameter("ACC_DOUBLE", (0, 1)),
        ),
        restrictions=("UNROLL * VEC <= 64",),
    ),
    # gemm.c: dot-product path (MR x NR) below PACK_MIN_M, packed outer-product path
    # (MR x NV*VEC) from it; 1073741824 = never pack. Accumulator tiles must fit the 32
    # vector registers of AVX-512 (AVX2 has 16: larger tiles spill there and time slower);
    # blocks hold whole register tiles.
    "gemm": DesignSpace(
        parameters=(*_GEMM_TILING, Parameter("REG_PIN", (0, 1))),
        restrictions=_GEMM_RESTRICTIONS,
    ),
    # softmax.c: EXP_DEGREE only matters with the polynomial exp, BLOCK only for ALGO 1.
    "softmax": DesignSpace(
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
    ),
    "fused_add_rmsnorm": DesignSpace(
        parameters=(
            Parameter("ROWS_PER_CHUNK", (1, 2, 4, 8, 16, 32)),
            Parameter("UNROLL", (1, 2, 4, 8)),
            Parameter("VEC", (1, 4, 8, 16)),
            Parameter("ACC_DOUBLE", (0, 1)),
            Parameter("RECOMPUTE", (0, 1)),
        ),
        restrictions=("UNROLL * VEC <= 64",),
    ),
    # kda.c: DV_BLOCK and FUSE belong to the recurrent algorithm, CHUNK to the chunked one.
    "kda": DesignSpace(
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
    ),
    # -- operators of the inference engines (engines/) -------------------------------------
    # layernorm.c: ALGO 0 two-pass, 1 shifted one-pass (both exact enough); LANES partial sums.
    "layernorm": DesignSpace(
        parameters=(
            Parameter("ROWS_PER_CHUNK", (1, 2, 4, 8, 16, 32)),
            Parameter("LANES", (1, 4, 8, 16, 32)),
            Parameter("ACC_DOUBLE", (0, 1)),
            Parameter("ALGO", (0, 1)),
        ),
        restrictions=(),
    ),
    "gelu": DesignSpace(
        parameters=(
            Parameter("ERF_IMPL", (0, 1)),
            Parameter("CHUNK", (1024, 4096, 16384)),
        ),
        restrictions=(),
    ),
    # gemm_bias.c: gemm.c's space plus the erf of the GELU epilogue.
    "gemm_bias": DesignSpace(
        parameters=(*_GEMM_TILING, Parameter("ERF_IMPL", (0, 1))),
        restrictions=_GEMM_RESTRICTIONS,
    ),
    "attention": DesignSpace(
        parameters=(
            Parameter("BQ", (1, 2, 4, 8)),
            Parameter("BK", (16, 32, 64, 128)),
            Parameter("SCHEDULE", (0, 1)),
        ),
        restrictions=(),
    ),
    "decode_attention": DesignSpace(
        parameters=(
            Parameter("BK", (16, 32, 64, 128, 256)),
            Parameter("GROUP", (0, 1)),
        ),
        restrictions=(),
    ),
    "rope": DesignSpace(
        parameters=(
            Parameter("ROWS_PER_CHUNK", (1, 4, 8, 32)),
            Parameter("PAR_MIN_ROWS", (1, 64, 1024)),
        ),
        restrictions=(),
    ),
    "swiglu": DesignSpace(
        parameters=(
            Parameter("CHUNK", (512, 2048, 8192)),
            Parameter("SIGMOID", (0, 1)),
        ),
        restrictions=(),
    ),
}


def load_template(workload: str, backend: str = "cpu") -> str:
    """Source text of the template for ``workload`` on ``backend``.

    Raises:
        KeyError: no template for that pair (the message lists what exists).
    """
    path = _DIR / f"{workload}{_SUFFIX.get(backend, '.' + backend)}"
    if not path.is_file():
        known = sorted(p.name for p in _DIR.iterdir() if p.suffix in set(_SUFFIX.values()))
        raise KeyError(f"no {backend} template for workload '{workload}' (known: {', '.join(known)})")
    return path.read_text()


def default_space(workload: str, backend: str = "cpu") -> DesignSpace:
    """The default design space of ``workload``'s template on ``backend`` (``"cpu"`` or
    ``"cuda"``; the CUDA spaces live in :mod:`kernels.templates.cuda`).

    Raises:
        KeyError: unknown workload or backend.
    """
    if backend == "cuda":
        return cuda_space(workload)
    if backend != "cpu":
        raise KeyError(f"no default spaces for backend '{backend}' (known: cpu, cuda)")
    try:
        return _DEFAULT_SPACES[workload]
    except KeyError:
        raise KeyError(f"no default space for '{workload}' (known: {', '.join(sorted(_DEFAULT_SPACES))})") from None


def default_launch_plan(workload: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The CUDA launch plan (JSON dict) of ``workload``'s ``.cu`` template at ``params``; see
    :func:`kernels.templates.cuda.default_launch_plan`.

    Raises:
        KeyError: no CUDA template for ``workload``.
    """
    return _cuda_launch_plan(workload, params)
