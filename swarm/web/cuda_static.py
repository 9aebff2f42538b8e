"""Static evidence of a CUDA candidate for its page: nvcc's resources, occupancy of every
launch at the timed shapes, and the PTX. Needs only nvcc (no GPU); says why when unavailable."""

from __future__ import annotations

from typing import Any

import kernels
from kernels.space import format_defines
from swarm.launch import launch_plan

PTX_LIMIT = 400_000  # characters of PTX shown


def arch_of(target: str) -> str:
    """``cuda-sm90`` -> ``sm_90``."""
    return "sm_" + target.split("-sm", 1)[1]


def candidate_static(candidate) -> dict[str, Any]:
    """``{"available": True, "summary": {...}, "ptx": str}`` or ``{"available": False, "reason"}``.

    ``summary`` is ``kernels.evaluation.cuda_pipeline.static_summary``'s dict: per-kernel registers, spills,
    shared memory, and per launch the theoretical occupancy and its limiting factor.
    """
    goal = candidate.goal
    if not goal.capabilities.static_report:
        return {"available": False, "reason": f"static analysis applies to CUDA targets; this goal runs on {goal.target}"}
    try:
        from kernels.backends.cuda import LaunchPlan, plan_env  # noqa: PLC0415
        from kernels.evaluation import static as ks  # noqa: PLC0415
        from kernels.evaluation.cuda_pipeline import static_summary  # noqa: PLC0415
    except ImportError as exc:
        return {"available": False, "reason": f"kernels' static analysis is not available here: {exc}"}
    arch = arch_of(goal.target)
    defines = format_defines(candidate.params)
    if ks.nvcc_path() is None:
        return {"available": False, "reason": "nvcc not found on the web host (set KERNELS_NVCC or put nvcc on PATH)"}
    try:
        report = ks.resource_usage(candidate.source, defines, arch=arch)
    except Exception as exc:  # noqa: BLE001 - CompileError and friends: shown on the page
        return {"available": False, "reason": f"nvcc failed: {exc}", "log": getattr(exc, "log", "")}
    by_label: dict[str, list] = {}
    plan_error = None
    try:
        wl = kernels.get_workload(goal.workload).for_shape_set(goal.shape_set)
        plan_dict = {k: v for k, v in launch_plan(candidate).items() if k in ("launches", "scratch")}
        plan = LaunchPlan.from_dict(plan_dict)
        buffers = list(wl.inputs) + list(wl.outputs)
        for shape in wl.shapes(goal.shape_set):
            label = ",".join(f"{k}={int(v)}" for k, v in shape.items())
            by_label[label], _ = plan.resolve(plan_env(wl, shape, candidate.params), buffers, arch=arch)
    except Exception as exc:  # noqa: BLE001 - resources still shown without occupancy
        plan_error = f"launch plan could not be resolved: {exc}"
    summary = static_summary(report, arch, by_label)
    try:
        ptx = ks.ptx(candidate.source, defines, arch)
    except Exception as exc:  # noqa: BLE001
        ptx = f"// PTX unavailable: {exc}"
    if len(ptx) > PTX_LIMIT:
        ptx = ptx[:PTX_LIMIT] + f"\n// ... cut at {PTX_LIMIT} characters"
    return {"available": True, "summary": summary, "ptx": ptx, "plan_error": plan_error}
