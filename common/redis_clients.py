"""Redis clients for the web and worker processes: bounded connection pools that make a caller wait for a free
connection instead of failing, clients for blocking pops (no socket timeout), the Channels layer's connection
options, and a client that writes large payloads from a thread without copying them. No Django."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PoolSize:
    """A Redis connection pool that makes a caller wait for a free connection (redis-py's
    BlockingConnectionPool) instead of failing with "Too many connections": at most `max_connections` open,
    a caller waits up to `timeout_s` for one, then gets a ConnectionError (`pool_exhausted`)."""

    max_connections: int = 2048  # REDIS_MAX_CONNECTIONS
    timeout_s: float = 10.0  # REDIS_POOL_TIMEOUT_S

    def options(self) -> dict[str, Any]:
        return {"max_connections": self.max_connections, "timeout": self.timeout_s}


def pool_size() -> PoolSize:
    """Each request-path Redis pool of this process (settings REDIS_MAX_CONNECTIONS, REDIS_POOL_TIMEOUT_S)."""
    from django.conf import settings

    return PoolSize(settings.REDIS_MAX_CONNECTIONS, float(settings.REDIS_POOL_TIMEOUT_S))


POOL_EXHAUSTED = "No connection available"  # redis-py's BlockingConnectionPool, after its timeout


def pool_exhausted(exc: BaseException, pool: PoolSize) -> str:
    """The 503 message for a RedisError: says so when every pooled connection stayed busy."""
    if POOL_EXHAUSTED in str(exc):
        return (
            f"all {pool.max_connections} Redis connections of this web process stayed in use for "
            f"{pool.timeout_s:g} s (REDIS_MAX_CONNECTIONS, REDIS_POOL_TIMEOUT_S): retry shortly"
        )
    return f"Redis is unavailable: {exc.__class__.__name__}: {str(exc)[:200]}"


def redis_from_url(url: str, *, asyncio: bool = False, pool: PoolSize | None = None) -> Any:
    """A Redis client for blocking pops: no socket timeout (redis-py's default 5 s would cut a longer
    BLPOP short); the command's own timeout bounds the wait. A command that finds its pooled connection
    dropped (Redis restarted) is retried once on a fresh connection, so it does not fail. With `pool`, its
    connections come from a BlockingConnectionPool of that size (a BLPOP holds one for its whole wait, so a
    web process needs one per request waiting for inference)."""
    from redis.backoff import NoBackoff

    if asyncio:
        import redis.asyncio as aredis
        from redis.asyncio.retry import Retry as AsyncRetry

        options: dict[str, Any] = {
            "socket_timeout": None,
            "socket_keepalive": True,
            "retry": AsyncRetry(NoBackoff(), 1),
        }
        if pool is None:
            return aredis.Redis.from_url(url, **options)
        return aredis.Redis(connection_pool=aredis.BlockingConnectionPool.from_url(url, **options, **pool.options()))
    import redis
    from redis.retry import Retry

    options = {"socket_timeout": None, "socket_keepalive": True, "retry": Retry(NoBackoff(), 1)}
    if pool is None:
        return redis.Redis.from_url(url, **options)
    return redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(url, **options, **pool.options()))


# channels_redis 4's RedisChannelLayer.brpop_timeout: a socket's receive is a BZPOPMIN that Redis answers after this
# many seconds when no message came (tests/webapp/test_live_sockets.py checks it against the installed layer).
CHANNEL_LAYER_BLOCKING_READ_S = 5
# The layer's socket timeout: longer than that blocking read, so an idle socket's BZPOPMIN is always answered
# (redis-py's default, 5 s, gave up just as Redis answered: two reads, the retry included, then a "Timeout reading"
# error that closed every job and teleop WebSocket after 10 s); still short enough to notice a Redis that hangs.
CHANNEL_LAYER_SOCKET_TIMEOUT_S = CHANNEL_LAYER_BLOCKING_READ_S + 10


def channel_layer_host(url: str, *, max_connections: int) -> dict[str, Any]:
    """One entry of channels_redis's CONFIG["hosts"]: a command that finds its pooled connection dropped (Redis
    restarted) is retried once on a fresh one, and the socket timeout outlasts the layer's blocking receive."""
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff

    return {
        "address": url,
        "retry": AsyncRetry(NoBackoff(), 1),
        "max_connections": max_connections,
        "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT_S,
        "socket_connect_timeout": 5,
        "socket_keepalive": True,
    }


def payload_redis_from_url(url: str, pool: PoolSize | None = None) -> Any:
    """A blocking Redis client for writing large payloads from a thread. Its commands are packed by
    redis-py's pure-Python packer, which sends a large argument as it is (socket `sendall`, the GIL
    released); the hiredis packer copies every argument into one buffer while holding the GIL. On the event
    loop, redis.asyncio copies a payload twice (asyncio's `writelines` joins, its transport buffers): three
    154 MB payloads sent to a full Redis held a web process's event loop, pages included, for 8 s
    (bench: 0.07 s from a thread with this client)."""
    import redis
    from redis._parsers.encoders import Encoder
    from redis.connection import PythonRespSerializer

    packer = PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode)
    size = pool or PoolSize()
    blocking = redis.BlockingConnectionPool.from_url(
        url, socket_keepalive=True, command_packer=packer, **size.options()
    )
    return redis.Redis(connection_pool=blocking)
