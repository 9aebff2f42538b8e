"""Send work to the Celery queue of each candidate's target, by task name.

The swarm's tasks are registered by :mod:`swarm.tasks` under the names below; this module
sends them through the current Celery app (``celery.current_app``, the project's app once
Django is set up) without importing the task module.
"""

from __future__ import annotations

from collections.abc import Iterable

from celery import current_app
from django.conf import settings
from django.db import transaction

from kernels.backends import capabilities
from swarm.models import Candidate

#: Task names (``@shared_task(name=...)`` in :mod:`swarm.tasks`).
EVALUATE = "swarm.evaluate"
EVALUATE_BATCH = "swarm.evaluate_batch"
VALIDATE_PROMOTION = "swarm.validate_promotion"
MEASURE_PAIRED = "swarm.measure_paired"
MEASURE_BASELINE = "swarm.measure_baseline"

#: Candidates per task for replay targets, whose evaluations cost microseconds: one task per
#: candidate would make the broker and the per-task transaction the bottleneck.
REPLAY_CHUNK = 64
#: In embedded mode one in-process worker serves every target, so all work goes to one queue.
EMBEDDED_QUEUE = "embedded"


def queue_for(candidate: Candidate) -> str:
    """Celery queue of a candidate: its target's (``target.cpu-x86_64``), or the embedded one."""
    return EMBEDDED_QUEUE if settings.EMBEDDED else candidate.goal.queue


def send(task: str, *args, queue: str) -> None:
    """Send the task named ``task`` with positional ``args`` to ``queue`` now."""
    current_app.send_task(task, args=list(args), queue=queue)


def send_on_commit(task: str, *args, queue: str) -> None:
    """:func:`send` once the current transaction commits (at once outside one), so that a
    worker never receives an id whose row it cannot see yet."""
    transaction.on_commit(lambda: send(task, *args, queue=queue))


def dispatch(candidates: Iterable[Candidate]) -> None:
    """Enqueue evaluation tasks on ``target.<target>``, after commit.

    Measured targets (cpu, cuda) get one ``evaluate`` task per candidate, so that several
    workers (one per GPU) share a generation; replay targets get ``evaluate_batch`` tasks of up
    to :data:`REPLAY_CHUNK` candidates. Deferring to commit means a worker never receives an id
    whose row it cannot see yet.
    """
    singles: list[tuple[int, str]] = []
    chunks: dict[str, list[int]] = {}
    for c in candidates:
        if capabilities(c.goal.backend).batchable:
            chunks.setdefault(queue_for(c), []).append(c.pk)
        else:
            singles.append((c.pk, queue_for(c)))

    def send_all() -> None:
        for pk, queue in singles:
            send(EVALUATE, pk, queue=queue)
        for queue, pks in chunks.items():
            for i in range(0, len(pks), REPLAY_CHUNK):
                send(EVALUATE_BATCH, pks[i:i + REPLAY_CHUNK], queue=queue)

    transaction.on_commit(send_all)


def dispatch_paired(run) -> None:
    """Send a :class:`swarm.models.PairedComparisonRun` to its target's queue (the A side's
    candidate's), after commit."""
    send_on_commit(MEASURE_PAIRED, run.pk, queue=queue_for(run.candidate_a))
