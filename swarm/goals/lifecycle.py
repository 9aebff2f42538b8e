"""Goals built from a workload's defaults (demo goal, headless runs); archiving, unarchiving
and duplicating a goal (the pages and the API use these)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

import kernels
from swarm.models import AuditEvent, Goal

DEFAULT_MAX_REL_ERROR = 1e-4


def default_name(workload: str, target: str, shape_set: str) -> str:
    """The name a goal of these gets unless someone names it: ``"<workload> / <target> /
    <shape set>: minimise latency"``."""
    return f"{workload} / {target} / {shape_set}: minimise latency"


def default_goal(workload: str, target: str, shape_set: str | None = None, *, user=None, name: str | None = None) -> Goal:
    """The goal of :func:`get_or_create_default_goal`."""
    return get_or_create_default_goal(workload, target, shape_set, user=user, name=name)[0]


def get_or_create_default_goal(workload: str, target: str, shape_set: str | None = None, *, user=None,
                               name: str | None = None) -> tuple[Goal, bool]:
    """``(goal, created)``: the goal named ``name`` (default derived from the arguments),
    created if needed.

    The goal minimises ``latency_ms`` (primary) and ``max_rel_error`` under the constraint
    ``max_rel_error <= 1e-4``, over the workload's default CPU design space and template.

    Raises:
        KeyError: unknown workload or shape set (the message lists the known ones).
    """
    spec = kernels.get_workload(workload)
    shape_set = shape_set or next(iter(spec.shape_sets))
    if shape_set not in spec.shape_sets:
        raise KeyError(f"unknown shape set {shape_set!r} for {workload}; known: {', '.join(spec.shape_sets)}")
    name = name or default_name(workload, target, shape_set)
    return Goal.objects.get_or_create(
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


# The goal fields a duplicate copies (its runs, creator and dates are its own).
COPIED_FIELDS = ("workload", "target", "shape_set", "objectives", "constraints", "space", "source", "dataset_path",
                 "llm_context_tokens", "prune_factor")


def set_archived(goal: Goal, archived: bool, user=None, via: str = "page") -> Goal:
    """Archive (``archived=True``) or unarchive ``goal``, recording ``goal.archive`` /
    ``goal.unarchive`` in the audit log. An archived goal keeps its runs and candidates, is
    hidden from the goal list's default tab and starts no runs. Archiving an archived goal
    (or unarchiving an active one) changes nothing and records nothing."""
    if goal.archived == archived:
        return goal
    with transaction.atomic():
        goal.archived_at = timezone.now() if archived else None
        goal.save(update_fields=["archived_at"])
        AuditEvent.objects.create(actor=user, verb="goal.archive" if archived else "goal.unarchive",
                                  subject=f"goal {goal.pk}", data={"name": goal.name, "via": via})
    return goal


def duplicate(goal: Goal, user=None, via: str = "page") -> Goal:
    """A new, active goal named ``"<name> (copy)"`` with ``goal``'s workload, target, shape
    set, objectives, constraints, space and template (no runs), created by ``user``; recorded
    as ``goal.create`` with ``duplicate_of`` in the audit log."""
    name = f"{goal.name} (copy)"[: Goal._meta.get_field("name").max_length]
    with transaction.atomic():
        copy = Goal.objects.create(name=name, created_by=user, **{f: getattr(goal, f) for f in COPIED_FIELDS})
        AuditEvent.objects.create(actor=user, verb="goal.create", subject=f"goal {copy.pk}",
                                  data={"name": copy.name, "duplicate_of": goal.pk, "via": via})
    return copy
