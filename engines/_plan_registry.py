"""The kernels one engine plan binds, as JSON, and the registry a sandbox child binds them from.

A plan evaluation (:func:`engines.goals.evaluate_plan`) runs in a sandbox child
(:mod:`engines._plan_child`), which sees no database and cannot run the compiler. The
parent resolves, with the registry it was given (:class:`engines._binding.ProductionRegistry`:
the database's, a static one, a tuning's :class:`engines._tuned.TunedRegistry`), what the
plan's kernel choices can bind and writes it down with :func:`plan_kernels`:

* ``production``: ``{workload: [spec, ...]}`` for every workload the plan binds to its
  production kernel (``KERNEL_<WORKLOAD>=2``): the registry's ``specs`` in its order of
  preference (a registry with only ``lookup`` gives the one kernel it looks up at no
  particular shape); the child binds the first covered at each operator's shape
  (:mod:`engines._coverage`), as this process would;
* ``templates``: ``{workload: spec}`` for every workload the plan binds to its template
  (``KERNEL_<WORKLOAD>=1``): the registry's measured template point where it has one
  (``template_point``), else the repository's template at its defaults; a workload without
  a CPU template is left out (it runs its baseline, here and there);
* ``why``: ``{workload: [choice, reason]}``: the registry's reason for the plan's choice
  (``why``, shown in the binding's note), where it gives one.

A spec is :class:`engines._binding.KernelSpec`'s fields as JSON; the parent adds each one's
``library`` (the shared object it compiled) before the request goes to the child.
:class:`PlanRegistry` is that JSON as a registry again.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from engines._binding import PRODUCTION, TEMPLATE, KernelSpec, template_spec
from engines._coverage import choose
from engines._plan import Plan


def spec_json(spec: KernelSpec) -> dict[str, Any]:
    """``spec``'s fields as JSON (tuples as lists, non-finite floats of its evidence as None)."""
    return _json(dataclasses.asdict(spec))


def spec_of_json(d: Mapping[str, Any]) -> KernelSpec:
    """The :class:`KernelSpec` of :func:`spec_json`'s dict (with its ``library``, if any)."""
    return KernelSpec(workload=d["workload"], source=d["source"], params=dict(d.get("params") or {}),
                      origin=d.get("origin", "production"), candidate=d.get("candidate"),
                      content_hash=d.get("content_hash", ""), shape_set=d.get("shape_set", ""),
                      evidence=dict(d.get("evidence") or {}),
                      validated_shapes=tuple(dict(s) for s in d.get("validated_shapes") or ()),
                      library=d.get("library", ""))


def plan_kernels(registry, plan: Plan, workloads: tuple[str, ...], target: str) -> dict[str, Any]:
    """What ``plan`` binds from ``registry`` for ``workloads`` on ``target`` (module docstring).

    Raises:
        whatever the registry raises (e.g. a database error).
    """
    production: dict[str, list[dict]] = {}
    templates: dict[str, dict] = {}
    why: dict[str, list] = {}
    reasons = getattr(registry, "why", None)
    points = getattr(registry, "template_point", None)
    for w in workloads:
        choice = plan.choice(w)
        if choice == PRODUCTION:
            specs = getattr(registry, "specs", None)
            if callable(specs):
                found = list(specs(w, target))
            else:
                one = registry.lookup(w, target, {})
                found = [one] if one is not None else []
            if found:
                production[w] = [spec_json(s) for s in found]
        elif choice == TEMPLATE:
            spec = points(w, target, {}) if callable(points) else None
            if spec is None:
                try:
                    spec = template_spec(w)
                except KeyError:  # no CPU template: the baseline runs
                    spec = None
            if spec is not None:
                templates[w] = spec_json(spec)
        reason = reasons(w, choice) if callable(reasons) else None
        if reason:
            why[w] = [int(choice), str(reason)]
    return {"production": production, "templates": templates, "why": why}


class PlanRegistry:
    """:func:`plan_kernels`'s JSON (each spec with its ``library``) as a registry:
    ``specs`` of the production kernels, ``template_point`` of the templates, ``why``."""

    def __init__(self, kernels: Mapping[str, Any]) -> None:
        self._production = {w: [spec_of_json(d) for d in ds] for w, ds in (kernels.get("production") or {}).items()}
        self._templates = {w: spec_of_json(d) for w, d in (kernels.get("templates") or {}).items()}
        self._why = {w: (int(c), str(r)) for w, (c, r) in (kernels.get("why") or {}).items()}

    def specs(self, workload: str, target: str) -> list[KernelSpec]:
        return list(self._production.get(workload, ()))

    def lookup(self, workload: str, target: str, shape: Mapping[str, int]) -> KernelSpec | None:
        return choose(self.specs(workload, target), shape)[0]

    def template_point(self, workload: str, target: str, shape: Mapping[str, int]) -> KernelSpec | None:
        return self._templates.get(workload)

    def why(self, workload: str, choice: int) -> str | None:
        c = self._why.get(workload)
        return c[1] if c and c[0] == int(choice) else None


def _json(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and callable(obj.item):  # a NumPy scalar
        return obj.item()
    return obj
