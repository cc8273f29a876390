"""Per-client rate limits on the `limits` library, counted in Redis so every web process shares them.

Three limits, each a setting in the `limits` notation ("100/second", "30 per 10 seconds"; empty turns it
off):

- `API_RATE_LIMIT`: every DRF request, per agent token, person or (anonymous) address;
- `REWARDS_RATE_LIMIT`: reward requests (the ASGI fast path and the DRF rewards views), per agent/person;
- `BAD_REQUEST_RATE_LIMIT`: requests answered with a 4xx, per token (or address); a client over it gets
  a cheap 429 before its body is read, so a misbehaving client cannot crowd out the others.

`RateLimiter` is written once, for asyncio (redis.asyncio, one per event loop): the ASGI fast paths await
it, DRF throttles and views call it through `async_to_sync` (`inference.throttles`). It uses the
sliding-window-counter strategy: two counters per key, no per-hit lists. When Redis cannot be reached, a
limit lets the request through (the request itself then fails with a clear 503 where it needs Redis)
rather than turning every request into a 500.
No Django here; `limiter()` in `inference.throttles` wires the settings.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import time
from dataclasses import dataclass

from limits import RateLimitItem, parse
from limits.aio.storage import RedisStorage as AsyncRedisStorage
from limits.aio.strategies import SlidingWindowCounterRateLimiter as AsyncSlidingWindow

log = logging.getLogger(__name__)

KEY_PREFIX = "rs:rl"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int = 0  # whole seconds until the client may try again (for Retry-After)
    limit: str = ""


ALLOWED = Verdict(True)


@functools.lru_cache(maxsize=64)
def rate_item(text: str) -> RateLimitItem | None:
    """A parsed limit, or None for an empty setting (no limit). Raises ValueError on bad notation.

    Remembered per text: the hot path asks for its limits on every request."""
    text = (text or "").strip()
    return parse(text) if text else None


def client_key(authorization: str, remote_addr: str) -> str:
    """Whom to count against before authentication: the token (hashed) when there is one, else the address."""
    if authorization:
        return "t:" + hashlib.sha256(authorization.encode()).hexdigest()[:16]
    return "ip:" + remote_addr


def _retry_after(reset_time: float) -> int:
    return max(1, math.ceil(reset_time - time.time()))


def _options() -> dict:
    # A dropped pooled connection (Redis restarted) is retried once on a fresh one.
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return {"retry": Retry(NoBackoff(), 1), "socket_timeout": 2.0, "socket_connect_timeout": 2.0}


class RateLimiter:
    """Limits over one Redis database (redis.asyncio); one per event loop."""

    def __init__(self, redis_url: str):
        url = redis_url if redis_url.startswith("async+") else "async+" + redis_url
        self.storage = AsyncRedisStorage(url, key_prefix=KEY_PREFIX, implementation="redispy", **_options())
        self.strategy = AsyncSlidingWindow(self.storage)

    async def hit(self, item: RateLimitItem | None, key: str) -> Verdict:
        """Count one request against `key`; whether it may go on."""
        return await self._verdict(item, key, count=True)

    async def check(self, item: RateLimitItem | None, key: str) -> Verdict:
        """Whether `key` is over the limit now, without counting a request."""
        return await self._verdict(item, key, count=False)

    async def _verdict(self, item: RateLimitItem | None, key: str, *, count: bool) -> Verdict:
        if item is None:
            return ALLOWED
        try:
            if await (self.strategy.hit if count else self.strategy.test)(item, key):
                return ALLOWED
            stats = await self.strategy.get_window_stats(item, key)
            return Verdict(False, _retry_after(stats.reset_time), str(item))
        except Exception as exc:  # Redis down: fail open, the request's own Redis use answers 503
            log.warning("rate limit not checked (Redis unavailable: %s)", exc)
            return ALLOWED


def too_many(verdict: Verdict, what: str) -> str:
    """The 429 message: which limit and when to come back."""
    return f"{what} ({verdict.limit}); retry in {verdict.retry_after} s"
