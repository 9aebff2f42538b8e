"""Periodic recovery: no queued work is lost when a web process, a worker or the broker dies.

Every worker process (``celery worker``, via the ``worker_ready`` signal) and the embedded
server run :func:`recover` every ``SWARM_SWEEP_EVERY_S`` seconds (0 disables it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

from celery import current_app
from django.conf import settings
from django.db import close_old_connections, transaction

from swarm.runs import orchestrator
from swarm.runs.dispatch import dispatch, queue_for

log = logging.getLogger(__name__)


def broker_depth(queue: str) -> int | None:
    """Messages waiting in ``queue`` on the broker (the current Celery app's), or None if the
    broker cannot say."""
    try:
        with current_app.connection_for_write() as conn:
            return conn.default_channel.queue_declare(queue=queue, passive=True).message_count
    except Exception:  # noqa: BLE001 - an undeclared queue or an unreachable broker: unknown
        return None


def recover() -> int:
    """Dispatch what :func:`swarm.runs.orchestrator.sweep` finds, and the next step of engine plan
    tunings (:func:`swarm.engine_registry.tuning.recover`) and of engine benchmarks requested
    from the page (:func:`swarm.engine_registry.bench_requests.recover`); returns the number of
    tasks sent.

    ``queued`` candidates are re-sent only when their target's queue is empty (or its depth is
    unknown), so a long healthy queue is not flooded with duplicates.
    """
    to_dispatch, queued = orchestrator.sweep()
    by_queue = defaultdict(list)
    for c in queued:
        by_queue[queue_for(c)].append(c)
    for queue, cands in by_queue.items():
        if not broker_depth(queue):
            to_dispatch += cands
    with transaction.atomic():
        dispatch(to_dispatch)
    if to_dispatch:
        log.info("sweep re-dispatched %d candidates", len(to_dispatch))
    from swarm.engine_registry.tuning import recover as recover_tunings

    tunings = recover_tunings()  # engine plan tunings whose next step may be lost
    if tunings:
        log.info("sweep dispatched the next step of %d engine plan tunings", tunings)
    from swarm.engine_registry.bench_requests import recover as recover_benchmarks

    benches = recover_benchmarks()  # engine benchmarks requested from the page, not yet claimed
    if benches:
        log.info("sweep re-dispatched %d engine benchmarks", benches)
    return len(to_dispatch) + tunings + benches


def start(every_s: float | None = None) -> threading.Thread | None:
    """Run :func:`recover` now and then every ``every_s`` seconds on a daemon thread."""
    every = settings.SWARM_SWEEP_EVERY_S if every_s is None else every_s
    if every <= 0:
        return None

    def loop() -> None:
        while True:
            try:
                recover()
            except Exception:  # noqa: BLE001 - keep sweeping; the next round retries
                log.exception("sweep failed")
            finally:
                close_old_connections()
            time.sleep(every)

    thread = threading.Thread(target=loop, name="swarm-sweeper", daemon=True)
    thread.start()
    return thread
