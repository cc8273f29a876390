"""Per-client limit on bad requests (no Django): a client that keeps sending requests answered with a
4xx gets a cheap 429 before its body is parsed, so it cannot crowd out the others."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import defaultdict, deque


class BadRequestLimiter:
    """Per-client limit on 4xx responses: a client that keeps sending bad requests gets a cheap 429
    before its body is even parsed, so it cannot crowd out the others."""

    def __init__(self, limit: int = 30, window_s: float = 10.0):
        self.limit, self.window_s = limit, window_s
        self._hits: dict[str, deque] = defaultdict(deque)
        self._lock = threading.Lock()

    def _trim(self, hits: deque, now: float) -> None:
        while hits and now - hits[0] > self.window_s:
            hits.popleft()

    def blocked(self, key: str) -> bool:
        with self._lock:
            hits = self._hits.get(key)
            if not hits:
                return False
            self._trim(hits, time.monotonic())
            return len(hits) >= self.limit

    def record(self, key: str) -> None:
        with self._lock:
            now = time.monotonic()
            hits = self._hits[key]
            self._trim(hits, now)
            hits.append(now)
            if len(self._hits) > 10_000:  # forget idle clients
                for k in [k for k, v in self._hits.items() if not v]:
                    del self._hits[k]


bad_requests = BadRequestLimiter()


def client_key(authorization: str, remote_addr: str) -> str:
    """Whom to count bad requests against: the token when there is one, else the address."""
    if authorization:
        return "t:" + hashlib.sha256(authorization.encode()).hexdigest()[:16]
    return "ip:" + remote_addr
