"""A run's progress (:func:`run_state`) and its end (:func:`finish`).

Both the generation loop (:mod:`swarm.runs.orchestrator`) and directions applied to a run
(:mod:`swarm.runs.directions`) end runs through :func:`finish`.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from swarm.models import PENDING_STATUSES, Direction, Run
from swarm.runs import events, llm_lane


def run_state(run: Run) -> dict[str, Any]:
    """Progress of a run: state, generation, budget, evaluated and status counts."""
    counts = dict(run.candidates.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    evaluated = sum(n for s, n in counts.items() if s not in PENDING_STATUSES)
    return {
        "id": run.pk,
        "state": run.state,
        "generation": run.generation,
        "budget": run.budget,
        "evaluated": evaluated,
        "status_counts": counts,
        "llm_usage": run.llm_usage,
        "end_kind": run.end_kind,
        "end_reason": run.end_reason,
    }


def finish(run: Run, state: str, kind: str, reason: str) -> None:
    """Mark ``run`` finished/stopped/failed with why (``kind``: a :class:`Run.EndKind`;
    ``reason``: words for the run page, the API and ``factory run --json``) and publish its
    final state after commit (inside the caller's transaction, which holds the run's row)."""
    run.state, run.end_kind, run.end_reason = state, kind, reason
    run.finished_at = timezone.now()
    run.save(update_fields=["state", "end_kind", "end_reason", "finished_at"])
    llm_lane.cancel(run)  # the lane's requests end with the run
    llm_lane.settle(run)  # answers finished but never taken were still paid for
    dropped = _drop_pending_directions(run, kind)
    transaction.on_commit(lambda: events.publish(run.pk, "run", run_state(run)))
    for d in dropped:
        transaction.on_commit(lambda d=d: events.publish(run.pk, "direction", d.to_dict()))


def _drop_pending_directions(run: Run, kind: str) -> list[Direction]:
    """Mark the run's pending directions ``not_applied`` (the run ended before its next
    proposal), with the reason in ``effect``; returns them."""
    pending = list(run.directions.filter(state=Direction.State.PENDING).select_related("author"))
    now = timezone.now()
    for d in pending:
        d.state, d.applied_at = Direction.State.NOT_APPLIED, now
        d.effect = {"not_applied": f"the run ended ({kind}) before it next proposed candidates"}
    Direction.objects.bulk_update(pending, ["state", "effect", "applied_at"])
    return pending
