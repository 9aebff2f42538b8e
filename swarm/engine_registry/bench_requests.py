"""Benchmarks of a production engine requested from the engines page, run as a Celery task on
the engine's target queue.

A request is an :class:`~swarm.engine_registry.models.EngineBenchmark` row in status
``queued``; the task ``engines.benchmark`` (sent by name to ``target.<target>``, or the
embedded queue in embedded mode) claims it (``queued`` -> ``running``, a conditional UPDATE, so
a duplicate message does nothing), then fills it in with :func:`record_benchmark` (status
``ok`` or the validation's status), or marks it ``failed`` with the error. The page shows the
row's status and, once done, its metrics.
"""

from __future__ import annotations

import logging
import traceback
from datetime import timedelta

from celery import current_app, shared_task
from django.db import transaction
from django.utils import timezone

from swarm.engine_registry.models import EngineBenchmark
from swarm.engine_registry.services import record_benchmark
from swarm.engine_registry.tuning import queue_for

log = logging.getLogger(__name__)

#: Task name (``@shared_task(name=...)`` below).
BENCHMARK = "engines.benchmark"
#: Statuses of a requested benchmark before it has a result.
QUEUED, RUNNING, FAILED = "queued", "running", "failed"
#: Timing repetitions per scenario (``manage.py engine bench --reps``' default).
DEFAULT_REPS = 7
#: A queued request older than this (s) is sent again by :func:`recover` (its message may be
#: lost with a restarted broker; the embedded queue lives in memory).
RESEND_AFTER_S = 60.0
#: A benchmark still ``running`` this long (s) after its request lost its worker: it is
#: marked ``failed`` by :func:`recover`.
LOST_AFTER_S = 3600.0


def request_benchmark(pe, *, reps: int = DEFAULT_REPS, user=None) -> EngineBenchmark:
    """Queue a benchmark of production engine ``pe`` (``reps`` timing repetitions per
    scenario); a request of ``pe`` already queued or running is returned instead.

    Raises:
        ValueError: ``reps`` below 1.
    """
    if int(reps) < 1:
        raise ValueError(f"repetitions must be at least 1 (got {reps})")
    live = pe.benchmarks.filter(status__in=[QUEUED, RUNNING]).first()
    if live is not None:
        return live
    who = f" by {user.get_username()}" if user is not None and user.is_authenticated else ""
    row = EngineBenchmark.objects.create(engine=pe, trigger=EngineBenchmark.Trigger.MANUAL, status=QUEUED,
                                         label=f"requested from the engines page{who}",
                                         validation={"requested": {"reps": int(reps)}})
    dispatch(row)
    return row


def dispatch(row: EngineBenchmark) -> None:
    """Send ``engines.benchmark`` for ``row`` to its engine's queue, after commit."""
    pk, queue = row.pk, queue_for(row.engine)
    reps = int(((row.validation or {}).get("requested") or {}).get("reps", DEFAULT_REPS))
    transaction.on_commit(lambda: current_app.send_task(BENCHMARK, args=[pk, reps], queue=queue))


@shared_task(name=BENCHMARK, acks_late=True, reject_on_worker_lost=True)
def run_benchmark(benchmark_id: int, reps: int = DEFAULT_REPS) -> str | None:
    """Celery task: run the requested benchmark ``benchmark_id``; returns its final status, or
    None when the row is unknown or already claimed (a duplicate message)."""
    return run(benchmark_id, reps)


def run(benchmark_id: int, reps: int = DEFAULT_REPS, **kw) -> str | None:
    """Claim and run a requested benchmark in this process (``kw``: :func:`record_benchmark`'s
    ``registry``, for tests). A benchmark that raises is ``failed`` with the error."""
    if not EngineBenchmark.objects.filter(pk=benchmark_id, status=QUEUED).update(status=RUNNING):
        return None
    row = EngineBenchmark.objects.select_related("engine").get(pk=benchmark_id)
    try:
        record_benchmark(row.engine, reps=int(reps), into=row, **kw)
    except Exception as exc:  # noqa: BLE001 - the request fails, the worker goes on
        log.exception("benchmark %s of engine %s failed", benchmark_id, row.engine.name)
        row.status = FAILED
        row.validation = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        row.save(update_fields=["status", "validation"])
    return row.status


def recover(now=None) -> int:
    """Send again every request queued for over :data:`RESEND_AFTER_S` (duplicates do nothing)
    and fail those running for over :data:`LOST_AFTER_S`; returns how many were sent."""
    now = now or timezone.now()
    EngineBenchmark.objects.filter(status=RUNNING, created_at__lt=now - timedelta(seconds=LOST_AFTER_S)).update(
        status=FAILED, validation={"error": f"no result {LOST_AFTER_S:.0f} s after it started: its worker was lost"})
    rows = list(EngineBenchmark.objects.select_related("engine").filter(
        status=QUEUED, created_at__lt=now - timedelta(seconds=RESEND_AFTER_S)))
    with transaction.atomic():
        for row in rows:
            dispatch(row)
    return len(rows)
