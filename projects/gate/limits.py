"""Per-client rate limits on the `limits` library, counted in Redis so every web process shares them.

Three limits, each a setting in the `limits` notation ("100/second", "30 per 10 seconds"; empty turns it
off):

- `API_RATE_LIMIT`: every DRF request, per agent token, person or (anonymous) address;
- `REWARDS_RATE_LIMIT`: reward requests (the ASGI fast path and the DRF rewards views), per agent/person;
- `BAD_REQUEST_RATE_LIMIT`: requests answered with a 4xx, per token (or address); a client over it gets
  a cheap 429 before its body is read, so a misbehaving client cannot crowd out the others.

`RateLimiter` is written once, for asyncio (redis.asyncio, one per event loop): the ASGI fast paths await
it, DRF throttles and views call it through `async_to_sync` (`projects.gate.throttles`). It uses the
sliding-window-counter strategy: two counters per key, no per-hit lists. `check_then_hit` checks one
limit and counts against another in one round trip (the library's own two scripts in one Lua call), as
the rewards fast path does for every request. When Redis cannot be reached, a
limit lets the request through (the request itself then fails with a clear 503 where it needs Redis)
rather than turning every request into a 500.
No Django here; `limiter()` in `projects.gate.throttles` wires the settings.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from limits import RateLimitItem, parse
from limits.aio.storage import RedisStorage as AsyncRedisStorage
from limits.aio.storage.redis.redispy import RedispyBridge
from limits.aio.strategies import SlidingWindowCounterRateLimiter as AsyncSlidingWindow

from common.redis_clients import PoolSize

log = logging.getLogger(__name__)

KEY_PREFIX = "rs:rl"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int = 0  # whole seconds until the client may try again (for Retry-After)
    limit: str = ""


ALLOWED = Verdict(True)


@lru_cache(maxsize=64)
def rate_item(text: str) -> RateLimitItem | None:
    """A parsed limit, or None for an empty setting (no limit). Raises ValueError on bad notation.
    Parsed once per text: the limits are looked up on every request."""
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


# The limits library's sliding-window scripts as two functions (their KEYS and ARGV as parameters), so that
# one call checks a limit (as SlidingWindowCounterRateLimiter.test does, cost 1) and then counts one hit
# against another: ARGV = check expiry s, check amount, hit amount (limit), hit expiry s, hit cost.
_CHECK_THEN_HIT = """
local function window(KEYS, ARGV)
{window}
end
local function acquire(KEYS, ARGV)
{acquire}
end
local w = window({{KEYS[1], KEYS[2]}}, {{ARGV[1]}})
local previous_ttl = math.max(0, tonumber(w[2]) or 0)
local weighted = (tonumber(w[1]) or 0) * previous_ttl / (tonumber(ARGV[1]) * 1000) + (tonumber(w[3]) or 0)
if weighted >= tonumber(ARGV[2]) then
  return {{0, 0}}
end
if acquire({{KEYS[3], KEYS[4]}}, {{ARGV[3], ARGV[4], ARGV[5]}}) then
  return {{1, 1}}
end
return {{1, 0}}
"""


class RateLimiter:
    """Limits over one Redis database (redis.asyncio); one per event loop."""

    def __init__(self, redis_url: str, pool: PoolSize | None = None):
        """`pool`: its connections come from a BlockingConnectionPool of that size (callers wait for a free
        one instead of failing with "Too many connections"; the library's default pool holds 100)."""
        url = redis_url if redis_url.startswith("async+") else "async+" + redis_url
        options: dict[str, Any] = _options()
        if pool is not None:
            from redis.asyncio import BlockingConnectionPool

            plain = redis_url.removeprefix("async+")
            options["connection_pool"] = BlockingConnectionPool.from_url(plain, **options, **pool.options())
            options = {"connection_pool": options["connection_pool"]}
        self.storage = AsyncRedisStorage(url, key_prefix=KEY_PREFIX, implementation="redispy", **options)
        self.strategy = AsyncSlidingWindow(self.storage)
        self._script: Any = None  # the check-then-hit script, registered on first use

    async def hit(self, item: RateLimitItem | None, key: str) -> Verdict:
        """Count one request against `key`; whether it may go on."""
        return await self._verdict(item, key, count=True)

    async def check(self, item: RateLimitItem | None, key: str) -> Verdict:
        """Whether `key` is over the limit now, without counting a request."""
        return await self._verdict(item, key, count=False)

    async def check_then_hit(
        self, checked: RateLimitItem | None, checked_key: str, counted: RateLimitItem | None, counted_key: str
    ) -> tuple[Verdict, Verdict]:
        """`check(checked, checked_key)`, then, only when that allows, `hit(counted, counted_key)`: the same
        verdicts in one Redis round trip (a refusal's Retry-After costs one more). A refused check leaves
        the counted limit alone (its verdict is then ALLOWED, unused)."""
        if checked is None or counted is None:
            first = await self.check(checked, checked_key)
            return first, (await self.hit(counted, counted_key) if first.allowed else ALLOWED)
        try:
            script = self._check_then_hit_script()
            keys = [*self._window_keys(checked, checked_key), *self._window_keys(counted, counted_key)]
            args = [checked.get_expiry(), checked.amount, counted.amount, counted.get_expiry(), 1]
            check_ok, hit_ok = await script(keys=keys, args=args)
            if not check_ok:
                stats = await self.strategy.get_window_stats(checked, checked_key)
                return Verdict(False, _retry_after(stats.reset_time), str(checked)), ALLOWED
            if not hit_ok:
                stats = await self.strategy.get_window_stats(counted, counted_key)
                return ALLOWED, Verdict(False, _retry_after(stats.reset_time), str(counted))
            return ALLOWED, ALLOWED
        except Exception as exc:  # Redis down: fail open, the request's own Redis use answers 503
            log.warning("rate limit not checked (Redis unavailable: %s)", exc)
            return ALLOWED, ALLOWED

    def _window_keys(self, item: RateLimitItem, key: str) -> list[str]:
        """The sliding window's (previous, current) Redis keys, named as the library names them."""
        storage, name = self.storage, item.key_for(key)
        bridge = storage.bridge
        return [
            bridge.prefixed_key(storage._previous_window_key(name)),
            bridge.prefixed_key(storage._current_window_key(name)),
        ]

    def _check_then_hit_script(self):
        if self._script is None:
            bridge = cast(RedispyBridge, self.storage.bridge)  # implementation="redispy"
            self._script = bridge.get_connection().register_script(
                _CHECK_THEN_HIT.format(
                    window=_text(bridge.SCRIPT_SLIDING_WINDOW), acquire=_text(bridge.SCRIPT_ACQUIRE_SLIDING_WINDOW)
                ).encode()
            )
        return self._script

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


def _text(script: bytes | str) -> str:
    return script.decode() if isinstance(script, bytes) else script


def too_many(verdict: Verdict, what: str) -> str:
    """The 429 message: which limit and when to come back."""
    return f"{what} ({verdict.limit}); retry in {verdict.retry_after} s"
