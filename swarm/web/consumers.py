"""Websocket consumer that streams a run's events to the run page."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from swarm.models import Run
from swarm.runs import events
from swarm.runs.progress import run_state
from swarm.web.snapshot import columnar_snapshot_json


class RunConsumer(AsyncJsonWebsocketConsumer):
    """``/ws/runs/<id>/``: a snapshot on connect, then every event of the run.

    Messages are ``{"event", "seq", "data"}``. The snapshot's ``seq`` is that of the last event
    it includes; each later event has the next number (:func:`swarm.runs.events.store`). Events can
    be lost on the way (a full channel): a client that sees a gap fetches the missing ones from
    ``/api/runs/<id>/events/?after=<seq>``.

    The snapshot is ``{"run": run_state, "candidates": [Candidate.to_dict()...]}``, or with
    ``?columns=1`` (the run page) the compact columnar form of
    :func:`swarm.web.snapshot.columnar_snapshot_json`, which stays small for 50,000 candidates.
    Origins are checked by :class:`int21_site.origins.SameOriginValidator`.

    Close codes: 4401 not signed in, 4404 no such run.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        events.bind_server_loop(asyncio.get_running_loop())
        # Join before reading the snapshot so no event falls between the two; events the
        # snapshot includes already arrive with a seq at or below its own and are skipped.
        self.group = events.group_name(self.run_id)
        await self._join()
        query = parse_qs(self.scope.get("query_string", b"").decode())
        columns = query.get("columns", ["0"])[0] == "1"
        # The sequence number first: every event up to it was committed before the snapshot's
        # queries start, so the snapshot includes it.
        seq = await database_sync_to_async(events.last_seq)(self.run_id)
        snapshot = await database_sync_to_async(_columnar_snapshot if columns else _snapshot)(self.run_id)
        if snapshot is None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.close(code=4404)
            return
        await self.accept()
        if columns:
            await self.send(text_data=f'{{"event":"snapshot","seq":{seq},"data":' + snapshot + "}")
        else:
            await self.send_json({"event": "snapshot", "seq": seq, "data": snapshot})

    async def _join(self) -> None:
        await self.channel_layer.group_add(self.group, self.channel_name)
        self.joined_at = time.monotonic()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_event(self, message: dict[str, Any]) -> None:
        # The Redis layer forgets a group member after group_expiry seconds; a page open longer
        # than that joins again rather than go quiet.
        expiry = getattr(self.channel_layer, "group_expiry", None)
        if expiry and time.monotonic() - self.joined_at > expiry / 2:
            await self._join()
        await self.send_json({"event": message["event"], "seq": message.get("seq"), "data": message["data"]})


def _snapshot(run_id: int) -> dict[str, Any] | None:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return None
    candidates = [c.to_dict() for c in run.candidates.select_related("evidence")]
    return {"run": run_state(run), "candidates": candidates}


def _columnar_snapshot(run_id: int) -> str | None:
    run = Run.objects.select_related("goal").filter(pk=run_id).first()
    return None if run is None else columnar_snapshot_json(run)
