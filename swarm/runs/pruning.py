"""What the evaluation of one candidate is given to stop early: the goal's prune limits from
its incumbent (:func:`prune_for`) and a check whether its candidate was cancelled
(:class:`CancelCheck`).

The incumbent is the goal's fastest feasible ``ok`` candidate (lowest ``latency_ms`` meeting
the run's constraints); its per-shape medians and timing child wall time, times the goal's
``prune_factor``, bound the candidate (:class:`kernels.evaluation.pruning.Prune`).
"""

from __future__ import annotations

import math
import time

from kernels.evaluation.pruning import Prune
from swarm.models import Candidate, CandidateStatus, Evidence, Run

#: Evidence rows scanned (fastest first) for one that meets the run's constraints.
INCUMBENT_SCAN = 50
#: Seconds between two reads of a running candidate's status (:class:`CancelCheck`).
CANCEL_POLL_S = 0.5


def prune_for(run: Run) -> Prune | None:
    """The prune limits of ``run``'s next evaluation, or None.

    None when the goal's primary objective is not ``latency_ms`` minimised, when its backend
    does not run candidates here (recorded data sets), or when no feasible ``ok`` candidate of
    the goal has per-shape latencies yet.
    """
    goal = run.goal
    primary = goal.primary
    if primary.get("metric") != "latency_ms" or primary.get("direction") != "minimize":
        return None
    if goal.capabilities.recorded:
        return None
    rows = (Evidence.objects.filter(candidate__goal=goal, status=CandidateStatus.OK, latency_ms__isnull=False)
            .order_by("latency_ms").values_list("candidate_id", "metrics", "fingerprint")[:INCUMBENT_SCAN])
    for cid, metrics, fingerprint in rows:
        if not run.is_feasible(metrics):
            continue
        shape_ms = {k[len("latency_ms["):-1]: float(v) for k, v in metrics.items()
                    if k.startswith("latency_ms[") and k.endswith("]") and isinstance(v, (int, float))
                    and not isinstance(v, bool) and math.isfinite(v) and v > 0}
        if not shape_ms:
            continue
        walls = (fingerprint or {}).get("child_wall_s")
        wall = walls.get("timing") if isinstance(walls, dict) else None  # a bare figure: no per-child times
        wall = float(wall) if isinstance(wall, (int, float)) and not isinstance(wall, bool) and wall >= 0 else None
        return Prune(factor=float(goal.prune_factor), shape_ms=shape_ms, timing_wall_s=wall,
                     incumbent={"candidate": cid})
    return None


class CancelCheck:
    """Callable: whether candidate ``pk`` was cancelled (its status is ``cancelled``), read at
    most every :data:`CANCEL_POLL_S` seconds (the evaluator asks about every 50 ms)."""

    def __init__(self, pk: int, every_s: float = CANCEL_POLL_S) -> None:
        self.pk, self.every_s = pk, every_s
        self.next_at = 0.0
        self.answer = False

    def __call__(self) -> bool:
        now = time.monotonic()
        if not self.answer and now >= self.next_at:
            self.next_at = now + self.every_s
            self.answer = Candidate.objects.filter(pk=self.pk, status=CandidateStatus.CANCELLED).exists()
        return self.answer
