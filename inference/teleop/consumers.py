"""WebSocket consumers for live teleop: the robot agent's stream and the dashboard viewers.

Agent (`/ws/teleop/agent/`, token auth with the `teleop` scope): thin dispatch to a `stream.TeleopStream`,
which owns the session, recording, scoring, stats and token watching; the consumer is its `Outlet` (reply
to the agent, publish to the session's group `teleop_<id>`, close). Viewers (`/ws/teleop/sessions/<id>/`,
session login, members of the session's project) only listen. Protocol: robot_agent/PROTOCOL.md.

A handler that raises is logged and answered with a warning (common.ws_guard); an exception anywhere else
ends the socket through `disconnect()`, which stops the stream (its tasks, then its session) whatever
fails on the way. Sessions a dead process left live are closed by `services.sessions_close_stale`.
"""

from __future__ import annotations

import json

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer

from common.ws_guard import Guarded
from labeling import permissions as labeling_perms
from projects import access

from . import services
from .stream import TeleopStream, group_name


class TeleopAgentConsumer(Guarded, AsyncWebsocketConsumer):
    stream: TeleopStream | None = None

    async def connect(self) -> None:
        agent = self.scope.get("agent")
        if agent is None:
            await self.close(code=4401)
            return
        if labeling_perms.TELEOP.scope not in (agent.scopes or []):
            await self.close(code=4403)  # the token lacks the teleop scope
            return
        self.stream = TeleopStream(agent, self)
        await self.accept()
        self.stream.start()

    async def disconnect(self, code: int) -> None:
        if self.stream is not None:
            await self.stream.stop()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.stream is None:
            return
        if bytes_data is not None:
            await self.stream.on_step(bytes_data)
        else:
            await self.stream.on_text(text_data)

    async def receive_failed(self, message: dict) -> None:
        """A message whose handling raised (logged by common.ws_guard): the agent is told, the stream goes on."""
        await self.reply(
            {"type": "warning", "message": "the server could not handle that message (see its log); the stream goes on"}
        )

    # -- the stream's outlet ----------------------------------------------------------------------
    async def reply(self, data: dict) -> None:
        await self.send(json.dumps(data))

    async def publish(self, group: str, data: dict) -> None:
        await self.channel_layer.group_send(group, {"type": "teleop.event", "data": data})


class TeleopDashboardConsumer(Guarded, AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.session_id: int | None = int(self.scope["url_route"]["kwargs"]["session_id"])
        outcome = await database_sync_to_async(services.session_viewer_access)(user=user, session_id=self.session_id)
        if outcome != 200:
            self.session_id = None
            await self.close(code=access.WS_CLOSE.get(outcome, 4404))
            return
        snapshot = await database_sync_to_async(services.session_snapshot)(session_id=self.session_id)
        if snapshot is None:
            await self.close(code=4404)
            return
        await self.channel_layer.group_add(group_name(self.session_id), self.channel_name)
        await self.accept()
        await self.send_json({"type": "snapshot", **snapshot})

    async def disconnect(self, code):
        session_id = getattr(self, "session_id", None)
        if session_id is not None:
            await self.channel_layer.group_discard(group_name(session_id), self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        pass  # viewers only listen: what they send is not even parsed

    async def teleop_event(self, event):
        await self.send_json(event["data"])
