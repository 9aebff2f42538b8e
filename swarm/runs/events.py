"""Publish run events to the run's Channels group.

In embedded mode the in-memory channel layer lives on the ASGI server's event loop, and
asyncio queues are not thread-safe, so the in-process worker thread hands each send to that
loop. Elsewhere (Redis layer, or no server running) sends go to one event loop per process,
run by a daemon thread: ``channels_redis`` keeps a connection pool per event loop, so a fresh
loop per send (``async_to_sync``) would also open a fresh Redis connection per event.

Every event is stored as a :class:`swarm.models.RunEvent` with the run's next sequence number
before it is sent, so delivery over the channel layer may lose events (a full channel, an
expired message, a dropped socket) and the page still shows them all: it sees the gap in the
numbers and fetches what it missed from ``/api/runs/<id>/events/?after=<seq>``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from swarm.models import RunEvent, RunEventSequence

log = logging.getLogger(__name__)

_server_loop: asyncio.AbstractEventLoop | None = None


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Remember the loop that serves websockets (``manage.py serve`` at start, and the consumer
    on connect): in-process events are stored and sent only once it is known."""
    global _server_loop
    _server_loop = loop


def group_name(run_id: int) -> str:
    return f"run.{run_id}"


def listening() -> bool:
    """Whether a published event can reach a websocket: False without a channel layer, or with
    the in-process layer and no websocket server in this process. Callers skip building event
    payloads (and the queries behind them) when it is False."""
    layer = get_channel_layer()
    if layer is None:
        return False
    return not (isinstance(layer, InMemoryChannelLayer) and _server_loop is None)


def publish(run_id: int, event: str, data: dict[str, Any]) -> None:
    """Store ``event`` as the run's next :class:`~swarm.models.RunEvent` and send
    ``{"event": event, "seq": seq, "data": data}`` to every websocket subscribed to the run.

    Inside a transaction both wait for its commit: an event describes committed state, and its
    sequence number must not be taken by work that is rolled back. ``data`` must be JSON.

    Sending is best effort: a broken channel layer is logged, never fatal to evaluation,
    because the event is stored and pages fetch what they missed.
    """
    if not listening():
        return
    transaction.on_commit(lambda: _store_and_send(run_id, event, data))


def _store_and_send(run_id: int, event: str, data: dict[str, Any]) -> None:
    try:
        seq = store(run_id, event, data)
    except Exception:  # noqa: BLE001 - see publish(); a run deleted meanwhile, a database gone
        log.exception("could not store %s event for run %s", event, run_id)
        return
    layer = get_channel_layer()
    message = {"type": "run.event", "event": event, "seq": seq, "data": data}
    group = group_name(run_id)
    try:
        loop = _server_loop
        if loop is not None and loop.is_running() and _on_other_thread(loop):
            asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop).result(timeout=5)
        elif isinstance(layer, InMemoryChannelLayer) or not _on_other_thread(own := _sender_loop()):
            async_to_sync(layer.group_send)(group, message)
        else:
            asyncio.run_coroutine_threadsafe(layer.group_send(group, message), own).result(timeout=5)
    except Exception:  # noqa: BLE001 - see publish()
        log.exception("could not send %s event %s of run %s; pages fetch it", event, seq, run_id)


def store(run_id: int, event: str, data: dict[str, Any]) -> int:
    """Store an event as the run's next :class:`~swarm.models.RunEvent`; return its ``seq``
    (1 for the run's first event).

    One transaction: the increment of the run's :class:`~swarm.models.RunEventSequence` row
    locks it until the event is written, so concurrent publishers (worker processes, threads)
    get consecutive numbers and a reader that sees number N sees every event up to N.

    Raises:
        django.db.IntegrityError: no run ``run_id``.
    """
    if connection.vendor == "postgresql":
        return _store_postgresql(run_id, event, data)
    with transaction.atomic():
        counter = RunEventSequence.objects.filter(run_id=run_id)
        if not counter.update(last_seq=F("last_seq") + 1):
            try:
                with transaction.atomic():
                    RunEventSequence.objects.create(run_id=run_id, last_seq=1)
            except IntegrityError:  # another publisher created it first, or no such run
                if not counter.update(last_seq=F("last_seq") + 1):
                    raise
        seq = counter.values_list("last_seq", flat=True).get()
        RunEvent.objects.create(run_id=run_id, seq=seq, event=event, data=data)
    return seq


def _store_postgresql(run_id: int, event: str, data: dict[str, Any]) -> int:
    """:func:`store` as one statement, so the run's counter row is locked for one round trip.

    ``synchronous_commit`` off: the commit does not wait for the WAL flush while the row is
    locked (a crash may lose the last events; pages reconnect to a fresh snapshot then).
    """
    seqs, rows = RunEventSequence._meta.db_table, RunEvent._meta.db_table
    sql = (
        f"WITH s AS (INSERT INTO {seqs} (run_id, last_seq) VALUES (%s, 1) ON CONFLICT (run_id) "
        f"DO UPDATE SET last_seq = {seqs}.last_seq + 1 RETURNING last_seq) "
        f"INSERT INTO {rows} (run_id, seq, event, data, at) SELECT %s, last_seq, %s, %s, %s FROM s RETURNING seq"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO OFF")
        cursor.execute(sql, [run_id, run_id, event, json.dumps(data), timezone.now()])
        return cursor.fetchone()[0]


def last_seq(run_id: int) -> int:
    """Sequence number of the run's last stored event; 0 before its first."""
    return RunEventSequence.objects.filter(run_id=run_id).values_list("last_seq", flat=True).first() or 0


_sender: tuple[int, asyncio.AbstractEventLoop] | None = None
_sender_lock = threading.Lock()


def _sender_loop() -> asyncio.AbstractEventLoop:
    """This process's publishing loop, started on first use (again after a fork: the thread
    running it does not survive one)."""
    global _sender
    with _sender_lock:
        if _sender is None or _sender[0] != os.getpid() or not _sender[1].is_running():
            loop = asyncio.new_event_loop()
            started = threading.Event()
            loop.call_soon(started.set)
            threading.Thread(target=loop.run_forever, name="channels-publisher", daemon=True).start()
            started.wait(5)
            _sender = (os.getpid(), loop)
        return _sender[1]


def _on_other_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is not loop
    except RuntimeError:
        return True
