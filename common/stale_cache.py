"""An in-process cache whose refreshes never hold up a request ("stale while revalidate"). No Django.

A value younger than `ttl_s` is fresh. An older one, up to `max_stale_s`, is still served, and the first
request that sees it starts one refresh in the background (`load(key)`, handed to `background`); only a
missing value, or one older than `max_stale_s`, makes the caller load it itself and `put` it. So a steady
stream of requests sees changes about `ttl_s` plus one load after they happen, and no request of that
stream waits for the load (at 10 Hz, a 1 s TTL that every tenth request paid for was the stream's p95).

A background load that finds nothing (None) drops the entry, so the next caller's own load decides (a
deleted row is noticed, and a row only the caller's transaction can see is not lost); one that fails
leaves the stale value for a later try. `forget` wins over a background load already under way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Entry(Generic[V]):
    at: float
    value: V | None
    generation: int


class StaleCache(Generic[K, V]):
    def __init__(
        self,
        load: Callable[[K], V | None],
        *,
        ttl_s: float,
        max_stale_s: float,
        background: Callable[[Callable[[], None]], object],
        clock: Callable[[], float] = time.monotonic,
    ):
        self.load = load
        self.ttl_s = ttl_s
        self.max_stale_s = max_stale_s
        self.background = background
        self.clock = clock
        self._entries: dict[K, _Entry[V]] = {}
        self._refreshing: set[K] = set()
        self._generation = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> tuple[bool, V | None]:
        """(True, value) when the cache answers (None: cached as missing); (False, None) when the caller
        must load the value itself and `put` it."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False, None
            age = self.clock() - entry.at
            if age < self.ttl_s:
                return True, entry.value
            if age >= self.max_stale_s:
                return False, None
            start = key not in self._refreshing
            if start:
                self._refreshing.add(key)
        if start:
            self.background(lambda: self._refresh(key, entry.generation))
        return True, entry.value

    def put(self, key: K, value: V | None) -> None:
        with self._lock:
            self._generation += 1
            self._entries[key] = _Entry(self.clock(), value, self._generation)

    def forget(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _refresh(self, key: K, generation: int) -> None:
        try:
            value = self.load(key)
        except Exception:  # the stale value stays; a later request tries again
            log.exception("background refresh of %r failed", key)
            value, failed = None, True
        else:
            failed = False
        with self._lock:
            self._refreshing.discard(key)
            current = self._entries.get(key)
            if failed or current is None or current.generation != generation:
                return  # forgotten or replaced meanwhile: that newer state wins
            if value is None:
                del self._entries[key]
            else:
                self._generation += 1
                self._entries[key] = _Entry(self.clock(), value, self._generation)
