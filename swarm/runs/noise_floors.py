"""Noise floors in the database: the ``kernels.comparison.noise_floor.FloorStore`` of the web application.

A target's worker measures the floor of its host when a paired comparison finds none stored
(``kernels.comparison.paired.compare_paired`` given :class:`DbFloorStore`) and writes it here, so the
web host, which cannot measure the target, reads it: the run page marks candidates tied with
the best (:func:`tied_with_best`) and agents are not credited for "improvements" inside it
(:mod:`swarm.runs.orchestrator`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from swarm.models import CandidateStatus, NoiseFloor
from swarm.runs.results import meeting_constraints, metric_expr

#: The floor assumed where none is stored for a (target, workload, shape set): 5%, the
#: tolerance ``swarm.engine_registry.guard`` applies to end-to-end timings. It errs on the side of
#: "tie": a larger floor credits fewer improvements and promotes fewer kernels; a measured
#: floor replaces it as soon as a worker of the target has run one paired comparison.
DEFAULT_FLOOR = 0.05


def _valid_floor(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


def _split_key(key: str) -> tuple[str, str, str]:
    """``(target, workload, shape_set)`` of a ``kernels.comparison.noise_floor.floor_key``:
    ``"<target>@<digest>/<workload>/<shape set>"`` (a workload name may hold ``/``)."""
    target, _, rest = key.partition("@")
    _, _, rest = rest.partition("/")
    workload, _, shape_set = rest.rpartition("/")
    return target, workload, shape_set


class DbFloorStore:
    """``kernels.comparison.noise_floor.FloorStore`` over :class:`swarm.models.NoiseFloor` rows."""

    def get(self, key: str) -> dict | None:
        """The entry stored under ``key`` (with ``floor`` a fraction >= 0), or None."""
        row = NoiseFloor.objects.filter(key=key).first()
        if row is None or not _valid_floor(row.floor):
            return None
        return {**(row.entry or {}), "floor": row.floor}

    def put(self, key: str, entry: dict) -> None:
        """Store ``entry`` under ``key`` (replacing an older one).

        Raises:
            ValueError: ``entry`` has no ``floor`` that is a fraction >= 0.
        """
        floor = entry.get("floor")
        if not _valid_floor(floor):
            raise ValueError(f"a noise floor entry needs a floor >= 0, got {floor!r}")
        target, workload, shape_set = _split_key(key)
        at = entry.get("measured_at")
        measured_at = (datetime.fromtimestamp(at, tz=UTC)
                       if isinstance(at, (int, float)) and math.isfinite(at) else timezone.now())
        fields = dict(target=str(entry.get("target") or target)[:64], workload=str(entry.get("workload") or workload)[:64],
                      shape_set=str(entry.get("shape_set") or shape_set)[:64],
                      fingerprint=entry.get("fingerprint") or {}, floor=float(floor), entry=entry,
                      measured_at=measured_at)
        try:
            with transaction.atomic():
                NoiseFloor.objects.update_or_create(key=key, defaults=fields)
        except IntegrityError:  # another worker stored the same key at the same moment
            NoiseFloor.objects.filter(key=key).update(**fields)


@dataclass(frozen=True)
class FloorInfo:
    """The floor used for a (target, workload, shape set) on the web host.

    Attributes:
        floor: fraction (0.02 = 2%).
        source: ``"stored"`` (measured by a worker of the target) or ``"default"``
            (:data:`DEFAULT_FLOOR`).
        key: the stored entry's key ("" for the default); measured_at: ISO time or None.
    """

    floor: float
    source: str
    key: str = ""
    measured_at: str | None = None

    def to_dict(self) -> dict:
        return {"floor": self.floor, "source": self.source, "key": self.key, "measured_at": self.measured_at}


def floor_for(target: str, workload: str, shape_set: str) -> FloorInfo:
    """The newest stored floor of (target, workload, shape set), whatever host fingerprint it
    was measured under (the web host cannot know which worker measures), else
    :data:`DEFAULT_FLOOR`."""
    row = (NoiseFloor.objects.filter(target=target, workload=workload, shape_set=shape_set)
           .order_by("-measured_at", "-id").first())
    if row is None or not _valid_floor(row.floor):
        return FloorInfo(DEFAULT_FLOOR, "default")
    return FloorInfo(float(row.floor), "stored", row.key, row.measured_at.isoformat())


def within_floor(latency_ms: float, best_ms: float, floor: float) -> bool:
    """True when ``latency_ms`` is no more than ``floor`` above ``best_ms``: the two cannot be
    told apart on this target (``latency_ms <= best_ms * (1 + floor)``)."""
    return latency_ms <= best_ms * (1.0 + floor)


#: At most this many tied candidates are listed (the run page computes the flag itself as
#: candidates arrive; the list is for the API and the first view).
TIED_LIMIT = 2000


def tied_with_best(run) -> dict:
    """The ``ok`` candidates of ``run`` meeting its constraints whose ``latency_ms`` lies
    within the noise floor of the best one's: ``latency_ms <= best * (1 + floor)``, the floor
    from :func:`floor_for` the goal's (target, workload, shape set).

    Returns:
        ``{"noise_floor": FloorInfo.to_dict(), "best_latency_ms": float or None,
        "tied_with_best": [candidate ids, fastest first, the best included, at most
        TIED_LIMIT]}``.
    """
    goal = run.goal
    info = floor_for(goal.target, goal.workload, goal.shape_set)

    ok = run.candidates.filter(status=CandidateStatus.OK).annotate(_lat=metric_expr("latency_ms"))
    qs = meeting_constraints(run, ok.filter(_lat__isnull=False).order_by())
    best = qs.order_by("_lat", "id").values_list("_lat", flat=True).first()
    ids: list[int] = []
    if best is not None:
        ids = list(qs.filter(_lat__lte=best * (1.0 + info.floor)).order_by("_lat", "id")
                   .values_list("id", flat=True)[:TIED_LIMIT])
    return {"noise_floor": info.to_dict(), "best_latency_ms": best, "tied_with_best": ids}
