"""Coalesce concurrent calls: calls made in the same event-loop turn with the same key go out as one. No Django.

    windows_send = Coalescer(send)               # send(key, items) -> one result per item, in order
    results = await windows_send(key, items)     # this caller's results

Several streams served by one web process tend to send their next request at the same moment (their
replies arrived together). Sending them as one broker request costs one Redis round trip, one message for
the worker to decode and one reply instead of one each, and hands the worker a whole batch at once. A
lone caller is not delayed: its call goes out on the loop's next turn. A failure of the joint call is
raised to every caller in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")

Send = Callable[[K, list[T]], Awaitable[Sequence[R]]]
Waiting = list[tuple[list[T], "asyncio.Future[list[R]]"]]


class Coalescer(Generic[K, T, R]):
    def __init__(self, send: Send[K, T, R]):
        self.send = send
        self._waiting: dict[tuple[asyncio.AbstractEventLoop, K], Waiting[T, R]] = {}
        self._sending: set[asyncio.Task[None]] = set()  # strong references to the running sends

    async def __call__(self, key: K, items: list[T]) -> list[R]:
        loop = asyncio.get_running_loop()
        waiting = self._waiting.get((loop, key))
        if waiting is None:
            waiting = self._waiting[(loop, key)] = []
            loop.call_soon(self._flush, loop, key)
        future: asyncio.Future[list[R]] = loop.create_future()
        waiting.append((list(items), future))
        return await future

    def _flush(self, loop: asyncio.AbstractEventLoop, key: K) -> None:
        calls = self._waiting.pop((loop, key))
        task = loop.create_task(self._send_joint(key, calls))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_joint(self, key: K, calls: Waiting[T, R]) -> None:
        try:
            results = list(await self.send(key, [item for items, _ in calls for item in items]))
            if len(results) != sum(len(items) for items, _ in calls):
                raise RuntimeError(f"got {len(results)} results for {sum(len(i) for i, _ in calls)} items")
        except Exception as exc:
            for _, future in calls:
                _settle(future, exception=exc)
            return
        offset = 0
        for items, future in calls:
            _settle(future, results[offset : offset + len(items)])
            offset += len(items)


def _settle(future: asyncio.Future, result: Any = None, exception: BaseException | None = None) -> None:
    if future.done():  # the caller gave up (cancelled)
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
