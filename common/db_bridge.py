"""The one bridge from the event loop to the database: which call to use, and why.

Async code (the ASGI fast paths, consumers, the serving core) must not call the ORM on the event loop. It
goes through one of two doors here, chosen by how often it calls:

- `orm_call(fn, *args)`: a call now and then (an agent lookup, a deployment's settings). It runs in the
  caller's thread when there is one (asgiref's thread-sensitive mode: DRF views and commands call the async
  serving core through `async_to_sync`), so it sees the caller's transaction. Like channels'
  `database_sync_to_async`, stale connections are closed around the call (the ASGI fast path has no request
  cycle that would), except while the caller's thread is inside a transaction: closing its connection would
  end the caller's atomic block (a service's, or a test's).
- `DatabaseThreads(name, workers).call(fn, *args)`: many calls a second (the ingest fast path's every chunk,
  live teleop sessions, the serving core's settings refresher). channels' `database_sync_to_async` closes
  the thread's connection around every call unless DB_CONN_MAX_AGE keeps it, and that setting is 0 by
  default. So each call opens a new connection, which on PostgreSQL means a new server process: a fork and
  an authentication, several milliseconds of CPU on both sides. These threads keep their connection between
  calls whatever DB_CONN_MAX_AGE is set to, so the default stays as Django has it (raising it would keep
  every request thread's connection too).

  A kept connection is checked before each call (one `SELECT 1`, well under a millisecond locally): one the
  server ended while it sat idle (a restart, an idle timeout, `pg_terminate_backend`) is replaced before the
  call runs, so no call fails for it. A connection that drops during a call fails that call's query. It is
  then closed, and the call runs once more on a fresh one when the caller says the call may be repeated
  (`retry`: idempotent, all-or-nothing calls). Otherwise the error goes to the caller and the next call
  connects anew. A connection left in a failed state is closed after the call.

Consumers' handlers that touch the database once per socket event keep channels' `database_sync_to_async`.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, close_old_connections, connection, connections

P = ParamSpec("P")
R = TypeVar("R")
_instances: weakref.WeakSet[DatabaseThreads] = weakref.WeakSet()


class DatabaseThreads:
    """`workers` threads named `name`; `prepare()` runs before each call, on the call's connection (e.g. a
    session setting set once per connection)."""

    def __init__(self, name: str, workers: int, prepare: Callable[[], None] | None = None):
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self.workers = workers
        self.prepare = prepare
        _instances.add(self)

    async def call(self, function: Callable[..., R], *args: Any, retry: bool = False, **kwargs: Any) -> R:
        """`function(*args, **kwargs)` on one of the threads, awaited without blocking the event loop."""
        if kwargs:
            function = functools.partial(function, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.run, function, args, retry)

    def run(self, function: Callable[..., R], args: tuple, retry: bool = False) -> R:
        """The same, on the calling thread (which must be one of these threads)."""
        for attempt in (1, 2):
            try:
                if connection.connection is not None and not connection.is_usable():
                    connection.close()  # ended by the server while idle: the call gets a fresh one
                if self.prepare is not None:
                    self.prepare()
                return function(*args)
            except (OperationalError, InterfaceError):
                again = retry and attempt == 1 and not connection.in_atomic_block
                connection.close()
                if not again:
                    raise
            finally:
                if connection.errors_occurred:
                    if connection.connection is not None and connection.is_usable():
                        connection.errors_occurred = False
                    else:
                        connection.close()
        raise AssertionError("unreachable")

    def close_connections(self) -> None:
        """Close every thread's connection (tests, so that the test database can be dropped; the threads
        connect again on their next call). Each thread takes one closing call: they meet at a barrier."""
        barrier = threading.Barrier(self.workers)

        def close_own() -> None:
            connections.close_all()
            barrier.wait(timeout=30)

        for future in [self.executor.submit(close_own) for _ in range(self.workers)]:
            future.result()

    def stop(self) -> None:
        """Close the connections and end the threads; no call is taken afterwards."""
        self.close_connections()
        _instances.discard(self)
        self.executor.shutdown(wait=True)


def close_all_connections() -> None:
    """`close_connections` of every DatabaseThreads of this process."""
    for threads in list(_instances):
        threads.close_connections()


async def orm_call(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs)` in the caller's thread (or asgiref's one database thread), awaited."""

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
