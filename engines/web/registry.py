"""Production kernels from the swarm's Promotion table, for engines running under Django."""

from __future__ import annotations

from collections.abc import Mapping

from engines._binding import KernelSpec


class DbRegistry:
    """:class:`engines._binding.ProductionRegistry` over ``swarm.Promotion`` (active rows).

    For an operator of shape ``shape`` it prefers the promotion whose shape set contains that
    exact shape, else the most recent active promotion of the workload on the target (every
    kernel must be correct for any shape, and the engine validation checks it end to end).
    ``overrides`` (workload -> KernelSpec) win: the guard puts a candidate in this way.
    """

    def __init__(self, overrides: Mapping[str, KernelSpec] | None = None) -> None:
        self.overrides = dict(overrides or {})

    def lookup(self, workload: str, target: str, shape: Mapping[str, int]) -> KernelSpec | None:
        if workload in self.overrides:
            return self.overrides[workload]
        from kernels.workloads import get_workload  # noqa: PLC0415
        from swarm.models import Promotion  # noqa: PLC0415

        rows = list(Promotion.objects.filter(workload=workload, target=target, active=True)
                    .select_related("candidate__evidence").order_by("-created_at"))
        if not rows:
            return None
        chosen = rows[0]
        try:
            wl = get_workload(workload)
            for p in rows:
                if any(dict(s) == dict(shape) for s in wl.shape_sets.get(p.shape_set, ())):
                    chosen = p
                    break
        except KeyError:
            pass
        return spec_of(chosen)

    def entries(self, target: str) -> list[dict]:
        """Active promotions on ``target`` as ``/api/production/``-like dicts (for the child
        process of the guard)."""
        from swarm.models import Promotion  # noqa: PLC0415

        out = []
        for p in Promotion.objects.filter(target=target, active=True).select_related("candidate__evidence"):
            ev = getattr(p.candidate, "evidence", None)
            out.append({"workload": p.workload, "target": p.target, "shape_set": p.shape_set, "source": p.candidate.source,
                        "params": p.candidate.params, "candidate": p.candidate_id, "hash": p.candidate.content_hash,
                        "evidence": {"status": ev.status if ev else None, "metrics": ev.metrics if ev else {}}})
        return out


def spec_of(promotion) -> KernelSpec:
    c = promotion.candidate
    ev = getattr(c, "evidence", None)
    return KernelSpec(workload=promotion.workload, source=c.source, params=c.params, origin="production",
                      candidate=c.pk, content_hash=c.content_hash, shape_set=promotion.shape_set,
                      evidence={"status": ev.status if ev else None,
                                "latency_ms": (ev.metrics or {}).get("latency_ms") if ev else None,
                                "max_rel_error": (ev.metrics or {}).get("max_rel_error") if ev else None})


def registry_for(production_engine):
    """The registry ``production_engine`` runs with: the database's production kernels plus
    the kernel choices its last plan tuning measured (:class:`engines._tuned.TunedRegistry`),
    so its template points are bound and every operator's binding says why."""
    from engines._tuned import TunedRegistry  # noqa: PLC0415

    return TunedRegistry(DbRegistry(), production_engine.kernel_points or {})
