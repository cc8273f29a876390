"""WebSocket consumers that clean up after any exception.

Channels runs a consumer's handlers (connect, receive, group events, disconnect) in its own task; when one
raises, the task ends there: `disconnect()` is never called, so whatever the socket started (tasks, a live
session, group memberships) stays behind. `Guarded` catches it in `dispatch`: the error is logged, a
received message's failure is answered with a warning and the socket goes on (`receive_failed`), and any
other handler's failure ends the socket through its own `disconnect()` and a close with code 1011.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from channels.exceptions import DenyConnection, StopConsumer

log = logging.getLogger(__name__)
INTERNAL_ERROR = 1011  # RFC 6455: the server met a condition it did not expect


class Guarded:
    """Mixin before a channels consumer class: `class C(Guarded, AsyncWebsocketConsumer)`."""

    cleaned_up = False

    async def dispatch(self, message: dict) -> None:
        try:
            await super().dispatch(message)  # type: ignore[misc]
        except (StopConsumer, DenyConnection, asyncio.CancelledError):
            raise
        except Exception:
            kind = message.get("type", "?")
            log.exception("%s: the %s handler failed", type(self).__name__, kind)
            if kind == "websocket.receive" and not self.cleaned_up:
                await self._quietly(self.receive_failed(message))
                return
            await self.end(f"{kind} failed")

    async def receive_failed(self, message: dict) -> None:
        """A received message raised: override to warn the client (the socket stays open)."""

    async def end(self, reason: str) -> None:
        """Run the consumer's cleanup once, close the socket and stop the consumer."""
        if not self.cleaned_up:
            self.cleaned_up = True
            groups: Any = getattr(self, "groups", None) or []
            layer: Any = getattr(self, "channel_layer", None)
            for group in groups:
                await self._quietly(layer.group_discard(group, self.channel_name))  # type: ignore[attr-defined]
            await self._quietly(self.disconnect(INTERNAL_ERROR))  # type: ignore[attr-defined]
            await self._quietly(self.close(code=INTERNAL_ERROR))  # type: ignore[attr-defined]
            log.warning("%s closed after an error (%s)", type(self).__name__, reason)
        raise StopConsumer()

    async def websocket_disconnect(self, message: dict) -> None:
        if self.cleaned_up:  # the cleanup ran already (end)
            raise StopConsumer()
        self.cleaned_up = True
        await super().websocket_disconnect(message)  # type: ignore[misc]

    @staticmethod
    async def _quietly(awaitable: Awaitable[object]) -> None:
        try:
            await awaitable
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("cleanup after a WebSocket error failed")
