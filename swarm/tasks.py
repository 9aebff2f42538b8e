"""Celery tasks: thin wrappers that load ids and call the orchestrator."""

from __future__ import annotations

from celery import shared_task

from swarm import orchestrator
from swarm.dispatch import dispatch


@shared_task(name="swarm.evaluate", acks_late=True, reject_on_worker_lost=True)
def evaluate(candidate_id: int) -> None:
    """Evaluate one candidate, store its evidence, then advance its run if the generation is done."""
    candidate = orchestrator.evaluate_candidate(candidate_id)
    if candidate is None:
        return
    dispatch(orchestrator.advance(candidate.run_id))
