"""Publish run events to the run's Channels group.

In embedded mode the in-memory channel layer lives on the ASGI server's event loop, and
asyncio queues are not thread-safe, so the in-process worker thread hands each send to that
loop. Elsewhere (Redis layer, or no server running) sends go to one event loop per process,
run by a daemon thread: ``channels_redis`` keeps a connection pool per event loop, so a fresh
loop per send (``async_to_sync``) would also open a fresh Redis connection per event.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

log = logging.getLogger(__name__)

_server_loop: asyncio.AbstractEventLoop | None = None


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Remember the loop that serves websockets (called by the consumer on connect)."""
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
    """Send ``{"event": event, "data": data}`` to every websocket subscribed to the run.

    Publishing is best effort: a broken channel layer is logged, never fatal to evaluation,
    because the evidence is already committed and pages reload it from the database.
    """
    if not listening():
        return
    layer = get_channel_layer()
    message = {"type": "run.event", "event": event, "data": data}
    group = group_name(run_id)
    try:
        loop = _server_loop
        if loop is not None and loop.is_running() and _on_other_thread(loop):
            asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop).result(timeout=5)
        elif isinstance(layer, InMemoryChannelLayer) or not _on_other_thread(own := _sender_loop()):
            async_to_sync(layer.group_send)(group, message)
        else:
            asyncio.run_coroutine_threadsafe(layer.group_send(group, message), own).result(timeout=5)
    except Exception:  # noqa: BLE001 - see docstring
        log.exception("could not publish %s event for run %s", event, run_id)


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
