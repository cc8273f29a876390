"""The rate limits of `projects.gate.limits` wired to the settings, and DRF throttles on top of them.

`ApiRateThrottle` is a default DRF throttle (settings.REST_FRAMEWORK); `RewardsRateThrottle` adds the
reward limit on the reward views. A trusted network's tokenless caller (an RL run's envs, all from one
address) is counted per address against TRUSTED_RATE_LIMIT instead of either. DRF answers a refused request with 429 and `Retry-After`. The limiter is
async (`limiter()`: this event loop's); sync callers use `limit_hit` / `limit_check` through `async_to_sync`.
"""

from __future__ import annotations

import asyncio
import weakref

from asgiref.sync import async_to_sync
from django.conf import settings
from limits import RateLimitItem
from rest_framework.throttling import BaseThrottle

from common.redis_clients import pool_size
from projects.gate.limits import RateLimiter, Verdict, rate_item

_limiters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def limiter() -> RateLimiter:
    """This event loop's limiter."""
    loop = asyncio.get_running_loop()
    found = _limiters.get(loop)
    if found is None:
        found = _limiters[loop] = RateLimiter(settings.REDIS_URL, pool_size())
    return found


async def limit_hit(item: RateLimitItem | None, key: str) -> Verdict:
    """Count one request against `key` (sync callers: `async_to_sync(limit_hit)`)."""
    return await limiter().hit(item, key)


async def limit_check(item: RateLimitItem | None, key: str) -> Verdict:
    """Whether `key` is over the limit now, without counting (sync callers: `async_to_sync(limit_check)`)."""
    return await limiter().check(item, key)


def api_limit():
    return rate_item(settings.API_RATE_LIMIT)


def rewards_limit():
    return rate_item(settings.REWARDS_RATE_LIMIT)


def bad_request_limit():
    return rate_item(settings.BAD_REQUEST_RATE_LIMIT)


def trusted_limit():
    return rate_item(settings.TRUSTED_RATE_LIMIT)


def identity(request) -> str:
    """An agent by id, a trusted network's tokenless caller by address, a person by id, anyone else by
    address."""
    user = getattr(request, "user", None)
    if user is not None and getattr(user, "token_hash", None):
        return f"a{user.pk}"
    if user is not None and getattr(user, "trusted_network", False):
        return f"n{user.address}"
    if user is not None and getattr(user, "is_authenticated", False):
        return f"u{user.pk}"
    return "ip:" + request.META.get("REMOTE_ADDR", "")


class _LimitThrottle(BaseThrottle):
    scope = ""

    def limit(self):
        raise NotImplementedError

    def allow_request(self, request, view):
        who = identity(request)
        limit = trusted_limit() if who.startswith("n") else self.limit()
        self.verdict: Verdict = async_to_sync(limit_hit)(limit, f"{self.scope}:{who}")
        return self.verdict.allowed

    def wait(self):
        return self.verdict.retry_after


class ApiRateThrottle(_LimitThrottle):
    """settings.API_RATE_LIMIT for every API request."""

    scope = "api"

    def limit(self):
        return api_limit()


class RewardsRateThrottle(_LimitThrottle):
    """settings.REWARDS_RATE_LIMIT for reward requests (shared with the ASGI fast path)."""

    scope = "rewards"

    def limit(self):
        return rewards_limit()
