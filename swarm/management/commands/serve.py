"""``manage.py serve``: the whole factory in one process (embedded mode).

Uvicorn serves HTTP and websockets on the main thread; a Celery worker consumes every
target queue on a thread, over kombu's ``memory://`` transport. Candidates left ``queued`` or
``running`` by a previous process are re-enqueued at start, so no queued work is lost.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

log = logging.getLogger("swarm")

EMBEDDED_QUEUES = ["target.cpu-x86_64", "control"]


class Command(BaseCommand):
    help = "Serve the web app with an in-process worker (embedded mode: no REDIS_URL)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, **opts) -> None:
        if not settings.EMBEDDED:
            raise CommandError(
                "REDIS_URL is set (production mode): run `uvicorn int21_site.asgi:application` and one "
                "`celery -A int21_site worker -Q target.<target> -c 1` per target instead"
            )
        import uvicorn

        start_embedded_worker()
        requeue_pending()
        self.stdout.write(f"Kernel Factory on http://{opts['host']}:{opts['port']}/  (embedded mode)", ending="\n")
        self.stdout.flush()
        uvicorn.run("int21_site.asgi:application", host=opts["host"], port=opts["port"], log_level="warning", lifespan="off")


def start_embedded_worker() -> threading.Thread:
    """Start a solo-pool Celery worker on a daemon thread, consuming the embedded queues."""
    from int21_site.celery_app import app

    worker = app.WorkController(
        app=app,
        pool_cls="solo",
        concurrency=1,
        queues=EMBEDDED_QUEUES,
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        loglevel="WARNING",
    )
    thread = threading.Thread(target=worker.start, name="embedded-celery-worker", daemon=True)
    thread.start()
    return thread


def requeue_pending() -> int:
    """Re-enqueue every candidate still ``queued`` or ``running`` in a running run."""
    from django.db.models import Q

    from swarm.dispatch import dispatch
    from swarm.models import Candidate, CandidateStatus, Run

    from django.db import transaction

    pending = list(
        Candidate.objects.filter(run__state=Run.State.RUNNING)
        .filter(Q(status=CandidateStatus.QUEUED) | Q(status=CandidateStatus.RUNNING))
        .select_related("goal")
    )
    # A "running" row here was left by a process that died mid-evaluation: hand it back.
    Candidate.objects.filter(pk__in=[c.pk for c in pending]).update(status=CandidateStatus.QUEUED)
    with transaction.atomic():
        dispatch(pending)
    if pending:
        log.info("re-enqueued %d pending candidates", len(pending))
    return len(pending)
