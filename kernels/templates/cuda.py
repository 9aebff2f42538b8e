"""Default CUDA design spaces and launch plans of the ``.cu`` templates.

Each template (``kernels/templates/<workload>.cu``) defines ``extern "C" __global__``
kernels whose tunables arrive as ``#define`` lines; :func:`default_launch_plan` gives the
:class:`~kernels.backends.cuda.LaunchPlan` (as its JSON dict) that launches them for a
parameter point, with grid, block and shared memory as safe expressions over the shape's
axes and the parameters. Restrictions keep every point launchable on sm_90/sm_100: at most
1024 threads per block, static shared memory under 48 KiB, dynamic shared memory for the
Llama-3-8B and Kimi Linear shapes under the 227 KiB opt-in limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kernels.space import DesignSpace, Parameter

__all__ = ["CUDA_SPACES", "cuda_space", "default_launch_plan"]

# SMEM_CACHE_MAX of the row-wise templates (rmsnorm.cu, softmax.cu, fused_add_rmsnorm.cu)
SMEM_CACHE_MAX = 200 * 1024


def _rows_plan(kernel: str, rows_axis: str, row_len_axis: str, args: list[str]) -> dict[str, Any]:
    rpb = "(BLOCK_SIZE // THREADS_PER_ROW)"
    row_bytes = f"{rpb} * {row_len_axis} * 4"
    return {
        "launches": [{
            "kernel": kernel,
            "grid": [f"({rows_axis} + {rpb} - 1) // {rpb}"],
            "block": ["BLOCK_SIZE"],
            # the row cache only when it fits SMEM_CACHE_MAX (as the kernel decides)
            "shared_mem_bytes": f"USE_SMEM * {row_bytes} * ({row_bytes} <= {SMEM_CACHE_MAX})",
            "args": args,
        }]
    }


def _gemm_plan(params: Mapping[str, Any]) -> dict[str, Any]:
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


# kda.cu: rows of the register-resident state, and the head dimension the space is sized
# for (Kimi Linear: dk = dv = 128). Larger dk still run (state in shared memory).
KDA_REG_DK_MAX = 128
KDA_DK = 128
SMEM_OPTIN_MAX = 227 * 1024  # sm_90 dynamic shared memory per block (opt-in)


def _kda_plan(params: Mapping[str, Any]) -> dict[str, Any]:
    align = "max(THREADS_PER_COL * VEC, 4)"
    ld = f"((dk + {align} - 1) // {align} * {align})"  # staged row length, zero-padded
    # two staging buffers; the state slab when STATE_SMEM or dk beyond the register state
    smem = (f"2 * CHUNK * (3 * {ld} + DV_BLOCK + 2) * 4"
            f" + max(STATE_SMEM, dk > {KDA_REG_DK_MAX}) * {ld} * DV_BLOCK * 4")
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


CUDA_SPACES: dict[str, DesignSpace] = {
    "rmsnorm": DesignSpace(
        parameters=(
            Parameter("BLOCK_SIZE", (64, 128, 256, 512, 1024)),
            Parameter("THREADS_PER_ROW", (8, 16, 32, 64, 128, 256, 512, 1024)),
            Parameter("VEC", (1, 2, 4)),
            Parameter("UNROLL", (1, 2, 4)),
            Parameter("USE_SMEM", (0, 1)),
        ),
        restrictions=(
            "THREADS_PER_ROW <= BLOCK_SIZE",
            # row cache of ROWS_PER_BLOCK rows (used only when it fits 200 KiB): hidden 4096
            # needs 16 KiB per row, so more than 8 rows per block would never use it
            "USE_SMEM == 0 or BLOCK_SIZE // THREADS_PER_ROW <= 8",
            "VEC * UNROLL <= 16",
        ),
    ),
    "softmax": DesignSpace(
        parameters=(
            Parameter("BLOCK_SIZE", (64, 128, 256, 512, 1024)),
            Parameter("THREADS_PER_ROW", (8, 16, 32, 64, 128, 256, 512, 1024)),
            Parameter("VEC", (1, 2, 4)),
            Parameter("ONLINE", (0, 1)),
            Parameter("USE_SMEM", (0, 1)),
        ),
        restrictions=(
            "THREADS_PER_ROW <= BLOCK_SIZE",
            # the row cache holds at most 200 KiB (vocabulary rows of 128256 floats never fit)
            "USE_SMEM == 0 or BLOCK_SIZE // THREADS_PER_ROW <= 8",
        ),
    ),
    "gemm": DesignSpace(
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
    ),
    "kda": DesignSpace(
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
            f"2 * CHUNK * (3 * {KDA_DK} + DV_BLOCK + 2) * 4 + STATE_SMEM * {KDA_DK} * DV_BLOCK * 4"
            f" <= {SMEM_OPTIN_MAX}",
        ),
    ),
}

CUDA_SPACES["fused_add_rmsnorm"] = CUDA_SPACES["rmsnorm"]  # same kernel structure and tunables

_PLANS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "rmsnorm": lambda p: _rows_plan("rmsnorm_kernel", "rows", "hidden", ["x", "w", "y", "rows", "hidden", "eps"]),
    "fused_add_rmsnorm": lambda p: _rows_plan(
        "fused_add_rmsnorm_kernel", "rows", "hidden",
        ["x", "residual", "w", "y", "residual_out", "rows", "hidden", "eps"]),
    "softmax": lambda p: _rows_plan("softmax_kernel", "rows", "cols", ["x", "y", "rows", "cols"]),
    "gemm": _gemm_plan,
    "kda": _kda_plan,
}


def cuda_space(workload: str) -> DesignSpace:
    """The default CUDA design space of ``workload``'s ``.cu`` template.

    Raises:
        KeyError: no CUDA template space for ``workload`` (lists the known ones).
    """
    try:
        return CUDA_SPACES[workload]
    except KeyError:
        raise KeyError(f"no CUDA design space for '{workload}' (known: {', '.join(sorted(CUDA_SPACES))})") from None


def default_launch_plan(workload: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The launch plan (JSON dict for :meth:`LaunchPlan.from_dict`) of ``workload``'s CUDA
    template at ``params`` (some plans depend on them, e.g. gemm's ``SPLIT_K > 1`` adds a
    reduction launch and a scratch buffer).

    Raises:
        KeyError: no CUDA template for ``workload``.
    """
    try:
        build = _PLANS[workload]
    except KeyError:
        raise KeyError(f"no CUDA launch plan for '{workload}' (known: {', '.join(sorted(_PLANS))})") from None
    return build(dict(params or {}))
