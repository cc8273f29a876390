"""Template context for every page: the Procfile processes that are down (the banner in base.html)."""

from __future__ import annotations

import functools
import time

from django.conf import settings

from webapp.monitoring.heartbeats import processes_down as _down_names
from webapp.monitoring.heartbeats import processes_up

_cached: tuple[float, list[str]] = (0.0, [])


@functools.cache
def _redis():
    import redis

    # short timeouts: a page waits at most this long for its banner when Redis is in trouble
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.5, socket_connect_timeout=0.5)


def down_now() -> list[str]:
    """Names of the processes that are down, read from Redis at most every HEALTH_BANNER_CACHE_SECONDS."""
    global _cached
    now = time.monotonic()
    expires, names = _cached
    if now < expires:
        return names
    try:
        names = _down_names(processes_up(_redis()))
    except Exception:
        names = ["Redis"]
    _cached = (now + settings.HEALTH_BANNER_CACHE_SECONDS, names)
    return names


def processes_down(request) -> dict:
    """`processes_down` is evaluated only by a template that shows it (logged-in pages)."""
    return {"processes_down": down_now}
