"""The job page's WebSocket: on connect the curves so far, then live events from the job's group. Messages from
the page are ignored unparsed; a handler that fails ends the socket through its cleanup (common.ws_guard)."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from common.ws_guard import Guarded
from projects import access
from training import permissions as training_perms

from .jobs.reporter import job_group


class JobConsumer(Guarded, AsyncJsonWebsocketConsumer):
    async def connect(self):
        actor = access.actor_of_scope(self.scope)
        if actor is None or not actor.is_authenticated:
            await self.close(code=4401)
            return
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        outcome = await self._allowed(actor)
        if outcome != 200:
            await self.close(code=access.WS_CLOSE.get(outcome, 4404))
            return
        snapshot = await self._snapshot()
        if snapshot is None:
            await self.close(code=4404)
            return
        await self.channel_layer.group_add(job_group(self.job_id), self.channel_name)
        await self.accept()
        await self.send_json({"event": "history", **snapshot})

    async def disconnect(self, code):
        if hasattr(self, "job_id"):
            await self.channel_layer.group_discard(job_group(self.job_id), self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        pass  # the page only listens: what it sends is not even parsed

    async def job_event(self, event):
        await self.send_json(event["message"])

    @database_sync_to_async
    def _allowed(self, actor) -> int:
        from .models import TrainingJob

        project_id = TrainingJob.objects.filter(pk=self.job_id).values_list("project_id", flat=True).first()
        return 404 if project_id is None else access.check(actor, training_perms.TRAINING_VIEW, project_id)

    @database_sync_to_async
    def _snapshot(self):
        from .selectors import job_history, job_state

        state = job_state(self.job_id)
        if state is None:
            return None
        return {**state, "points": job_history(self.job_id)}
