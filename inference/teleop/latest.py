"""Newest-frame-wins inference scheduling for one live stream. No Django.

At most one inference runs at a time and one frame waits in a single slot. A frame that arrives while
another waits replaces it; the replaced one is counted as dropped. The backlog therefore never exceeds
one frame however far inference falls behind, and the frame scored next is always the newest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class LatestFrameSlot(Generic[T]):
    def __init__(self, run: Callable[[T], Awaitable[None]]):
        self.run = run
        self.pending: T | None = None
        self.busy = False
        self.dropped = 0
        self.submitted = 0
        self.completed = 0
        self._task: asyncio.Task | None = None

    @property
    def backlog(self) -> int:
        """Frames waiting (0 or 1) plus the one in flight."""
        return int(self.pending is not None) + int(self.busy)

    def submit(self, item: T) -> bool:
        """Queue `item`; True when it replaced a waiting frame (that frame is dropped)."""
        self.submitted += 1
        if not self.busy:
            self.busy = True
            self._task = asyncio.ensure_future(self._drain(item))
            return False
        replaced = self.pending is not None
        if replaced:
            self.dropped += 1
        self.pending = item
        return replaced

    async def _drain(self, item: T | None) -> None:
        try:
            while item is not None:
                try:
                    await self.run(item)
                except asyncio.CancelledError:
                    raise
                except Exception:  # one failed frame must not stop the stream
                    log.exception("teleop inference failed")
                self.completed += 1
                item, self.pending = self.pending, None
        finally:
            self.busy = False

    async def close(self) -> None:
        self.pending = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
