"""How a candidate is called: the launch plan an inference engine needs to load it."""

from __future__ import annotations

from typing import Any

from kernels.backends import capabilities
from kernels.space import format_defines


def launch_plan(candidate) -> dict[str, Any]:
    """Launch plan of ``candidate`` as JSON.

    CPU: the C entry point to call with its prototype and the ``#define`` lines to prepend
    (docs/design.md's candidate contract). CUDA: the plan of the workload's template at the
    candidate's parameters (:func:`kernels.templates.default_launch_plan`), or the candidate's
    own plan when it carries one. Replay: the recorded configuration (nothing to launch).
    """
    goal = candidate.goal
    backend = goal.backend
    defines = format_defines(candidate.params)
    caps = capabilities(backend)
    if caps.recorded:
        return {"backend": backend, "dataset": goal.target.split(":", 1)[1], "params": candidate.params}
    own = getattr(candidate, "launch_plan", None)
    if caps.launch_plan:
        plan = own
        if not plan:
            from kernels.templates import default_launch_plan  # noqa: PLC0415

            try:
                plan = default_launch_plan(goal.workload, candidate.params)
            except KeyError as exc:
                return {"backend": "cuda", "defines": defines, "error": str(exc).strip("'\"")}
        return {"backend": "cuda", "target": goal.target, "defines": defines, **plan}
    import kernels  # noqa: PLC0415

    try:
        wl = kernels.get_workload(goal.workload)
        entry, signature = wl.entry_point, wl.c_signature
        args = [{"name": a.name, "kind": a.kind} for a in wl.args]
    except KeyError:
        entry, signature, args = goal.workload, "", []
    return {"backend": backend, "target": goal.target, "entry_point": entry, "signature": signature,
            "args": args, "defines": defines, "compile": "prepend the defines to the source; C11 + OpenMP"}
