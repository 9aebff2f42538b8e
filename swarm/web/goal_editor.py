"""What the goal editor shows as it is edited: a workload's defaults on a target, and the live
check of a design space with the template previewed at its first valid point.

The page renders its form from :func:`defaults`; its script asks the API
(``GET /api/goals/defaults/``, ``POST /api/goals/check-space/``), which answers with these.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from django import forms as django_forms

import kernels
from kernels.space import format_defines
from swarm.goals import lifecycle
from swarm.goals.validation import GoalInvalid, check_space, default_template, empty_space_message, template_problem
from swarm.models import target_backend
from swarm.web.forms import format_parameters, parse_parameters
from swarm.web.views._common import highlighted

#: The editor's text fields that :func:`check` reads.
FIELDS = ("parameters", "restrictions", "source", "workload", "target")


def defaults(workload: str, target: str, shape_set: str = "") -> dict:
    """The default name, shape set, design space (as the form's text fields) and template of a
    goal of ``workload`` on ``target``; ``shape_set`` defaults to the workload's first.

    Raises:
        KeyError: unknown workload or shape set. ValueError: unknown target.
    """
    backend = target_backend(target)
    spec = kernels.get_workload(workload)
    shape_set = shape_set or next(iter(spec.shape_sets))
    if shape_set not in spec.shape_sets:
        raise KeyError(f"unknown shape set {shape_set!r} for {workload}; known: {', '.join(spec.shape_sets)}")
    space = kernels.default_space(workload, backend).to_dict()
    return {"name": lifecycle.default_name(workload, target, shape_set), "shape_set": shape_set,
            "parameters": format_parameters(space), "restrictions": "\n".join(space.get("restrictions", [])),
            "source": default_template(workload, target)}


def check(fields: Mapping[str, str]) -> dict:
    """Check the editor's ``parameters``, ``restrictions``, ``source``, ``workload`` and
    ``target`` text fields.

    Returns:
        ``{"ok", "errors", "size", "point", "preview"}``: ``errors`` maps a field to the message
        shown in place; ``size`` is ``{"valid", "cartesian", "exact"}``; ``preview`` the template
        (or ``source``) as highlighted HTML, preceded by the ``#define`` lines of ``point``, the
        first valid point. A space that cannot be parsed gives only ``ok`` and ``errors``.
    """
    errors: dict[str, str] = {}
    try:
        parameters = parse_parameters(fields.get("parameters", ""))
    except django_forms.ValidationError as exc:
        return {"ok": False, "errors": {"parameters": exc.messages[0]}}
    restrictions = [r.strip() for r in fields.get("restrictions", "").splitlines() if r.strip()]
    try:
        space, size = check_space({"parameters": parameters, "restrictions": restrictions})
    except GoalInvalid as exc:
        return {"ok": False, "errors": {f: m[0] for f, m in exc.errors.items()}}
    if size["valid"] == 0:
        errors["restrictions"] = empty_space_message(space, size)
    source = fields.get("source", "")
    backend = "cpu"
    try:
        backend = target_backend(fields.get("target", "cpu-x86_64"))
    except ValueError as exc:
        errors.setdefault("target", str(exc).strip("'\""))
    else:
        if not source.strip():
            workload, target = fields.get("workload", ""), fields.get("target", "")
            why = template_problem(workload, target)
            if why:
                errors.setdefault("target", why)
            else:
                source = default_template(workload, target)
    point = next(iter(space.sample(np.random.default_rng(0), 1)), None) if size["valid"] else None
    point = point or {p.name: p.values[0] for p in space.parameters}
    preview = highlighted(format_defines(point, order=space.names) + source, backend) if source else ""
    return {"ok": not errors, "errors": errors, "size": size, "point": point, "preview": preview}
