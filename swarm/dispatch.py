"""Send evaluation work to the Celery queue of each candidate's target."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.db import transaction

from swarm.models import Candidate


#: Candidates per task for replay targets, whose evaluations cost microseconds: one task per
#: candidate would make the broker and the per-task transaction the bottleneck.
REPLAY_CHUNK = 64
#: In embedded mode one in-process worker serves every target, so all work goes to one queue.
EMBEDDED_QUEUE = "embedded"


def queue_for(candidate: Candidate) -> str:
    """Celery queue of a candidate: its target's (``target.cpu-x86_64``), or the embedded one."""
    return EMBEDDED_QUEUE if settings.EMBEDDED else candidate.goal.queue


def dispatch(candidates: Iterable[Candidate]) -> None:
    """Enqueue evaluation tasks on ``target.<target>``, after commit.

    Measured targets (cpu, cuda) get one ``evaluate`` task per candidate, so that several
    workers (one per GPU) share a generation; replay targets get ``evaluate_batch`` tasks of up
    to :data:`REPLAY_CHUNK` candidates. Deferring to commit means a worker never receives an id
    whose row it cannot see yet.
    """
    from swarm.tasks import evaluate, evaluate_batch

    singles: list[tuple[int, str]] = []
    chunks: dict[str, list[int]] = {}
    for c in candidates:
        if c.goal.backend == "replay":
            chunks.setdefault(queue_for(c), []).append(c.pk)
        else:
            singles.append((c.pk, queue_for(c)))

    def send() -> None:
        for pk, queue in singles:
            evaluate.apply_async(args=[pk], queue=queue)
        for queue, pks in chunks.items():
            for i in range(0, len(pks), REPLAY_CHUNK):
                evaluate_batch.apply_async(args=[pks[i:i + REPLAY_CHUNK]], queue=queue)

    transaction.on_commit(send)


def dispatch_paired(run) -> None:
    """Send a :class:`swarm.models.PairedComparisonRun` to its target's queue (the A side's
    candidate's), after commit."""
    from swarm.tasks import measure_paired

    pk, queue = run.pk, queue_for(run.candidate_a)
    transaction.on_commit(lambda: measure_paired.apply_async(args=[pk], queue=queue))
