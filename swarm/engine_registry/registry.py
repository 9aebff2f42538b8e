"""Production kernels from the swarm's Promotion table, for engines running under Django."""

from __future__ import annotations

from collections.abc import Mapping

from engines._binding import KernelSpec
from engines._coverage import choose
from engines._tuned import TunedRegistry
from swarm.engine_registry.models import GuardCheck
from swarm.models import Promotion


class DbRegistry:
    """:class:`engines._binding.ProductionRegistry` over ``swarm.Promotion`` (active rows).

    ``specs`` lists the workload's active promotions on the target, newest first; the binding
    takes the first covered at the operator's shape (:mod:`engines._coverage`): by its shape
    set, or by the shapes a passed promotion guard check validated and benchmarked it at
    (:func:`guard_shapes`). ``overrides`` (workload -> KernelSpec) win: the guard puts a
    candidate in this way.
    """

    def __init__(self, overrides: Mapping[str, KernelSpec] | None = None) -> None:
        self.overrides = dict(overrides or {})

    def specs(self, workload: str, target: str) -> list[KernelSpec]:
        if workload in self.overrides:
            return [self.overrides[workload]]
        rows = (Promotion.objects.filter(workload=workload, target=target, active=True)
                .select_related("candidate__evidence").order_by("-created_at", "-id"))
        return [spec_of(p) for p in rows]

    def lookup(self, workload: str, target: str, shape: Mapping[str, int]) -> KernelSpec | None:
        return choose(self.specs(workload, target), shape)[0]

    def entries(self, target: str) -> list[dict]:
        """Active promotions on ``target`` as ``/api/production/``-like dicts, oldest first
        (for the child process of the guard, whose registry puts the last given first)."""
        out = []
        for p in (Promotion.objects.filter(target=target, active=True).select_related("candidate__evidence")
                  .order_by("created_at", "id")):
            ev = getattr(p.candidate, "evidence", None)
            out.append({"workload": p.workload, "target": p.target, "shape_set": p.shape_set, "source": p.candidate.source,
                        "params": p.candidate.params, "candidate": p.candidate_id, "hash": p.candidate.content_hash,
                        "evidence": {"status": ev.status if ev else None, "metrics": ev.metrics if ev else {}},
                        "validated_shapes": guard_shapes(p.candidate_id, p.workload, p.target)})
        return out


def guard_shapes(candidate_id: int, workload: str, target: str) -> list[dict]:
    """The operator shapes of ``workload`` at which passed promotion guard checks of the
    candidate validated and benchmarked it (``evidence["engines"][name]["shapes"]``)."""
    out: list[dict] = []
    for check in GuardCheck.objects.filter(candidate_id=candidate_id, workload=workload, target=target, ok=True):
        for eng in ((check.evidence or {}).get("engines") or {}).values():
            for s in eng.get("shapes") or ():
                if isinstance(s, dict) and s not in out:
                    out.append(s)
    return out


def spec_of(promotion) -> KernelSpec:
    c = promotion.candidate
    ev = getattr(c, "evidence", None)
    return KernelSpec(workload=promotion.workload, source=c.source, params=c.params, origin="production",
                      candidate=c.pk, content_hash=c.content_hash, shape_set=promotion.shape_set,
                      evidence={"status": ev.status if ev else None,
                                "latency_ms": (ev.metrics or {}).get("latency_ms") if ev else None,
                                "max_rel_error": (ev.metrics or {}).get("max_rel_error") if ev else None},
                      validated_shapes=tuple(guard_shapes(c.pk, promotion.workload, promotion.target)))


def registry_for(production_engine):
    """The registry ``production_engine`` runs with: the database's production kernels plus
    the kernel choices its last plan tuning measured (:class:`engines._tuned.TunedRegistry`),
    so its template points are bound and every operator's binding says why."""
    return TunedRegistry(DbRegistry(), production_engine.kernel_points or {})
