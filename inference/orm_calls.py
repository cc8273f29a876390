"""ORM calls from the async serving core, safe for each kind of caller.

The serving core is async; DRF views and commands call it through `async_to_sync`, so an ORM call it makes
runs back in the caller's thread (asgiref's thread-sensitive mode). Like channels' `database_sync_to_async`,
stale connections are closed around the call (the ASGI fast path has no request cycle that would), except
while the caller's thread is inside a transaction: closing its connection would end the caller's atomic
block (a service's, or a test's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connection

P = ParamSpec("P")
R = TypeVar("R")


async def orm_call(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    def run() -> R:
        outside = not connection.in_atomic_block
        if outside:
            close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            if outside:
                close_old_connections()

    return await sync_to_async(run, thread_sensitive=True)()
