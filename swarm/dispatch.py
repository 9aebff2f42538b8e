"""Send evaluation work to the Celery queue of each candidate's target."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from swarm.models import Candidate


def dispatch(candidates: Iterable[Candidate]) -> None:
    """Enqueue one ``evaluate`` task per candidate on ``target.<target>``, after commit.

    Deferring to commit means a worker never receives an id whose row it cannot see yet.
    """
    from swarm.tasks import evaluate

    items = [(c.pk, c.goal.queue) for c in candidates]

    def send() -> None:
        for pk, queue in items:
            evaluate.apply_async(args=[pk], queue=queue)

    transaction.on_commit(send)
