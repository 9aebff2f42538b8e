"""Goals built from a workload's defaults (demo goal, headless runs)."""

from __future__ import annotations

import kernels
from swarm.models import Goal

DEFAULT_MAX_REL_ERROR = 1e-4


def default_goal(workload: str, target: str, shape_set: str | None = None, *, user=None, name: str | None = None) -> Goal:
    """Return the goal named ``name`` (default derived from the arguments), creating it if needed.

    The goal minimises ``latency_ms`` (primary) and ``max_rel_error`` under the constraint
    ``max_rel_error <= 1e-4``, over the workload's default CPU design space and template.

    Raises:
        KeyError: unknown workload or shape set (the message lists the known ones).
    """
    spec = kernels.get_workload(workload)
    shape_set = shape_set or next(iter(spec.shape_sets))
    if shape_set not in spec.shape_sets:
        raise KeyError(f"unknown shape set {shape_set!r} for {workload}; known: {', '.join(spec.shape_sets)}")
    name = name or f"{workload} / {target} / {shape_set}: minimise latency"
    goal, _ = Goal.objects.get_or_create(
        name=name,
        workload=workload,
        target=target,
        shape_set=shape_set,
        defaults=dict(
            objectives=[
                {"metric": "latency_ms", "direction": "minimize"},
                {"metric": "max_rel_error", "direction": "minimize"},
            ],
            constraints=[{"metric": "max_rel_error", "op": "<=", "value": DEFAULT_MAX_REL_ERROR}],
            space=kernels.default_space(workload).to_dict(),
            source=kernels.load_template(workload, "cpu"),
            created_by=user,
        ),
    )
    return goal
