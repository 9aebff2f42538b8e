"""A production registry plus the kernel choices a plan tuning measured (:mod:`engines.tuning`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from engines._binding import KernelSpec, NoProduction
from engines._coverage import choose


class TunedRegistry:
    """A production registry plus a tuning's kernel choices (``{workload: choice}`` as in a
    tuning state's ``choices``).

    ``lookup`` is the base registry's; ``template_point`` gives the chosen template point of a
    workload whose choice is a template point; ``why`` gives the reason of a workload's choice
    when the plan binds it as chosen (the binding shows it, :func:`engines._binding.bind`).
    """

    def __init__(self, base=None, choices: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.base = base if base is not None else NoProduction()
        self.choices = {w: dict(c) for w, c in (choices or {}).items()}

    def specs(self, workload: str, target: str) -> list[KernelSpec]:
        """The base registry's production kernels of ``workload``; the one this tuning chose is
        validated and benchmarked at the shapes it was measured at (``validated_shapes``), so
        it binds there (:mod:`engines._coverage`)."""
        base = getattr(self.base, "specs", None)
        found = list(base(workload, target)) if callable(base) else []
        c = self.choices.get(workload)
        if not c or c.get("kind") != "production":
            return found
        extra = tuple(dict(s) for s in c.get("shapes") or ())
        return [dataclasses.replace(s, validated_shapes=(*s.validated_shapes, *extra))
                if s.candidate == c.get("candidate") else s for s in found]

    def lookup(self, workload: str, target: str, shape: Mapping[str, int]) -> KernelSpec | None:
        if callable(getattr(self.base, "specs", None)):
            return choose(self.specs(workload, target), shape)[0]
        return self.base.lookup(workload, target, shape)

    def template_point(self, workload: str, target: str, shape: Mapping[str, int]) -> KernelSpec | None:
        from kernels.templates import load_template  # noqa: PLC0415

        c = self.choices.get(workload)
        if not c or c.get("kind") != "template":
            return None
        return KernelSpec(workload=workload, source=load_template(workload, "cpu"), params=dict(c.get("params") or {}),
                          origin="template", shape_set=c.get("shape_set", ""),
                          evidence={"status": "ok", "latency_ms": c.get("latency_ms")})

    def why(self, workload: str, choice: int) -> str | None:
        c = self.choices.get(workload)
        return c.get("why") if c and int(c.get("choice", -1)) == int(choice) else None

    def __getattr__(self, name: str):  # entries(), overrides, ... of the base registry
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)
