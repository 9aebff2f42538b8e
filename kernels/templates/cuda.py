"""Default CUDA design spaces and launch plans of the ``.cu`` templates.

Each template (``kernels/templates/<workload>.cu``) defines ``extern "C" __global__``
kernels whose tunables arrive as ``#define`` lines; :func:`default_launch_plan` gives the
:class:`~kernels.backends.cuda.LaunchPlan` (as its JSON dict) that launches them for a
parameter point, with grid, block and shared memory as safe expressions over the shape's
axes and the parameters. Restrictions keep every point launchable on sm_90/sm_100: at most
1024 threads per block, static shared memory under 48 KiB, dynamic shared memory for the
Llama-3-8B shapes under the 227 KiB opt-in limit.
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
}

CUDA_SPACES["fused_add_rmsnorm"] = CUDA_SPACES["rmsnorm"]  # same kernel structure and tunables

_PLANS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "rmsnorm": lambda p: _rows_plan("rmsnorm_kernel", "rows", "hidden", ["x", "w", "y", "rows", "hidden", "eps"]),
    "fused_add_rmsnorm": lambda p: _rows_plan(
        "fused_add_rmsnorm_kernel", "rows", "hidden",
        ["x", "residual", "w", "y", "residual_out", "rows", "hidden", "eps"]),
    "softmax": lambda p: _rows_plan("softmax_kernel", "rows", "cols", ["x", "y", "rows", "cols"]),
    "gemm": _gemm_plan,
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
