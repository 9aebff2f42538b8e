"""Websocket consumer that streams a run's events to the run page."""

from __future__ import annotations

import asyncio
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from swarm import events


class RunConsumer(AsyncJsonWebsocketConsumer):
    """``/ws/runs/<id>/``: a snapshot on connect, then every event of the run.

    Close codes: 4401 not signed in, 4404 no such run.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        events.bind_server_loop(asyncio.get_running_loop())
        # Join before reading the snapshot so no event falls between the two; the page
        # de-duplicates candidates by id.
        self.group = events.group_name(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        snapshot = await database_sync_to_async(_snapshot)(self.run_id)
        if snapshot is None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.close(code=4404)
            return
        await self.accept()
        await self.send_json({"event": "snapshot", "data": snapshot})

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_event(self, message: dict[str, Any]) -> None:
        await self.send_json({"event": message["event"], "data": message["data"]})


def _snapshot(run_id: int) -> dict[str, Any] | None:
    from swarm.models import Run
    from swarm.orchestrator import run_state

    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return None
    candidates = [c.to_dict() for c in run.candidates.select_related("evidence")]
    return {"run": run_state(run), "candidates": candidates}
