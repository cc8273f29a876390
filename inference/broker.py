"""The Redis protocol between web processes and inference workers. No Django.

Web side: LPUSH a request onto the deployment's list `rs:inf:q:<name>`, then BLPOP the request's own
reply key with a timeout. Worker side: BRPOP (oldest first), batch, score, RPUSH each reply and let it
expire. A request carries the deployment version the web side saw (the worker reloads when it is newer
than its model), the batching policy and a deadline after which nobody waits for the answer (the worker
skips it). Replies carry per-item results only; rewards are computed where the settings live.

Bounds: a deployment's queue holds at most `max_queue` requests (a request that finds it full is
answered at once with an error reply naming the limit, which the web side turns into a 503) and expires
`queue_ttl_s` after the last push, so a queue nobody serves does not stay in Redis.

Message layout: 4-byte big-endian header length, JSON header, then the payload: a `.npy` array
(uint8, first axis = items), read with `allow_pickle=False`.
"""

from __future__ import annotations

import io
import json
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from redis.exceptions import RedisError

QUEUE_PREFIX = "rs:inf:q:"
REPLY_PREFIX = "rs:inf:r:"
WORKERS_KEY = "rs:inf:workers"
SAMPLE_COUNTER_PREFIX = "rs:inf:served:"
HISTORY_PREFIX = "rs:inf:hist:"
REPLY_TTL_S = 60
WORKER_ALIVE_S = 30.0  # a worker's heartbeat is this fresh while it runs (loading a model included)
_HEADER_LEN = struct.Struct(">I")


class BrokerError(Exception):
    """Inference did not produce a result; the message says why (fit for a 503)."""


class WorkerError(BrokerError):
    """The worker answered with an error, e.g. the model failed to load."""


class InferenceTimeout(BrokerError):
    """No worker answered in time."""


class MessageError(ValueError):
    """A message that does not follow the protocol."""


def queue_key(deployment: str) -> str:
    return QUEUE_PREFIX + deployment


@dataclass
class InferenceRequest:
    deployment: str
    version: int
    payload: bytes  # .npy bytes
    deadline: float  # unix time after which nobody waits for the reply
    max_batch_size: int = 64
    max_wait_ms: float = 2.0
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    enqueued_at: float = field(default_factory=time.time)
    _array: np.ndarray | None = field(default=None, repr=False)

    @property
    def reply_key(self) -> str:
        return REPLY_PREFIX + self.id

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = load_npy(self.payload)
        return self._array

    def encode(self) -> bytes:
        header = {
            "id": self.id,
            "deployment": self.deployment,
            "version": self.version,
            "deadline": self.deadline,
            "max_batch_size": self.max_batch_size,
            "max_wait_ms": self.max_wait_ms,
            "enqueued_at": self.enqueued_at,
        }
        raw = json.dumps(header).encode()
        return _HEADER_LEN.pack(len(raw)) + raw + self.payload

    @classmethod
    def decode(cls, message: bytes) -> InferenceRequest:
        try:
            (length,) = _HEADER_LEN.unpack_from(message)
            header = json.loads(message[4 : 4 + length])
            return cls(
                deployment=str(header["deployment"]),
                version=int(header["version"]),
                payload=bytes(message[4 + length :]),
                deadline=float(header["deadline"]),
                max_batch_size=int(header["max_batch_size"]),
                max_wait_ms=float(header["max_wait_ms"]),
                id=str(header["id"]),
                enqueued_at=float(header["enqueued_at"]),
            )
        except (struct.error, ValueError, KeyError, TypeError) as exc:
            raise MessageError(f"malformed inference request: {exc}") from None


@dataclass
class Reply:
    results: list[Any] | None
    error: str = ""
    version: int = 0
    worker: str = ""

    def encode(self) -> bytes:
        return json.dumps(
            {"results": self.results, "error": self.error, "version": self.version, "worker": self.worker}
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Reply:
        data = json.loads(raw)
        return cls(
            data.get("results"), data.get("error") or "", int(data.get("version") or 0), data.get("worker") or ""
        )

    def unwrap(self) -> list[Any]:
        if self.error or self.results is None:
            raise WorkerError(self.error or "the inference worker returned no results")
        return self.results


def any_worker_alive(heartbeats: dict) -> bool:
    """Whether any heartbeat in the workers hash (id -> JSON with "at") is recent."""
    now = time.time()
    for raw in heartbeats.values():
        try:
            if now - float(json.loads(raw).get("at", 0)) < WORKER_ALIVE_S:
                return True
        except (ValueError, TypeError, AttributeError):
            continue
    return False


def dump_npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def load_npy(raw: bytes) -> np.ndarray:
    return np.load(io.BytesIO(raw), allow_pickle=False)


def _request(deployment: str, version: int, payload: bytes, timeout: float, max_batch_size: int, max_wait_ms: float):
    return InferenceRequest(
        deployment=deployment,
        version=version,
        payload=payload,
        deadline=time.time() + timeout,
        max_batch_size=max_batch_size,
        max_wait_ms=max_wait_ms,
    )


# Push if the queue has room, else put the "full" reply where the caller waits: one round trip either way.
_PUSH_IF_ROOM = """
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[2]) then
  redis.call('RPUSH', KEYS[2], ARGV[4])
  redis.call('EXPIRE', KEYS[2], ARGV[5])
  return -1
end
local n = redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return n
"""


@dataclass(frozen=True)
class QueueBounds:
    max_queue: int = 1000  # requests waiting per deployment
    queue_ttl_s: int = 120  # the queue key expires this long after its last push


def queue_full_message(deployment: str, max_queue: int) -> str:
    return (
        f"the inference queue of deployment {deployment!r} is full ({max_queue} requests waiting, "
        "INFERENCE_QUEUE_MAX): the workers are behind; retry shortly"
    )


def _push_and_wait(pipe, request: InferenceRequest, timeout: float, bounds: QueueBounds):
    """Queue the request (if its queue has room) and wait for its reply in one round trip (sync or asyncio
    pipeline)."""
    full = Reply(None, queue_full_message(request.deployment, bounds.max_queue)).encode()
    pipe.eval(
        _PUSH_IF_ROOM,
        2,
        queue_key(request.deployment),
        request.reply_key,
        request.encode(),
        bounds.max_queue,
        bounds.queue_ttl_s,
        full,
        REPLY_TTL_S,
    )
    pipe.blpop([request.reply_key], timeout=timeout)
    return pipe


def _reply(got, deployment: str, timeout: float) -> Reply:
    if got is None:
        raise InferenceTimeout(
            f"no inference worker answered for deployment {deployment!r} within {timeout:g} s (is one running?)"
        )
    return Reply.decode(got[1])


def redis_from_url(url: str, *, asyncio: bool = False):
    """A Redis client for blocking pops: no socket timeout (redis-py's default 5 s would cut a longer
    BLPOP short); the command's own timeout bounds the wait. A command that finds its pooled connection
    dropped (Redis restarted) is retried once on a fresh connection, so it does not fail."""
    from redis.backoff import NoBackoff

    if asyncio:
        import redis.asyncio as aredis
        from redis.asyncio.retry import Retry as AsyncRetry

        return aredis.Redis.from_url(url, socket_timeout=None, socket_keepalive=True, retry=AsyncRetry(NoBackoff(), 1))
    import redis
    from redis.retry import Retry

    return redis.Redis.from_url(url, socket_timeout=None, socket_keepalive=True, retry=Retry(NoBackoff(), 1))


class BrokerClient:
    """Web side, blocking (redis-py). Thread-safe: each call borrows a pooled connection."""

    def __init__(self, redis, bounds: QueueBounds | None = None):
        self.redis = redis
        self.bounds = bounds or QueueBounds()

    def submit(
        self,
        deployment: str,
        version: int,
        payload: bytes,
        *,
        timeout: float = 30.0,
        max_batch_size: int = 64,
        max_wait_ms: float = 2.0,
    ) -> Reply:
        request = _request(deployment, version, payload, timeout, max_batch_size, max_wait_ms)
        try:
            got = _push_and_wait(self.redis.pipeline(transaction=False), request, timeout, self.bounds).execute()[1]
        except RedisError as exc:
            raise BrokerError(f"Redis is unavailable: {exc}") from None
        return _reply(got, deployment, timeout)


class AsyncBrokerClient:
    """Web side, asyncio (redis.asyncio), for consumers and async views."""

    def __init__(self, redis, bounds: QueueBounds | None = None):
        self.redis = redis
        self.bounds = bounds or QueueBounds()

    async def submit(
        self,
        deployment: str,
        version: int,
        payload: bytes,
        *,
        timeout: float = 30.0,
        max_batch_size: int = 64,
        max_wait_ms: float = 2.0,
    ) -> Reply:
        request = _request(deployment, version, payload, timeout, max_batch_size, max_wait_ms)
        try:
            got = (
                await _push_and_wait(self.redis.pipeline(transaction=False), request, timeout, self.bounds).execute()
            )[1]
        except RedisError as exc:
            raise BrokerError(f"Redis is unavailable: {exc}") from None
        return _reply(got, deployment, timeout)


def send_replies(redis, replies: list[tuple[InferenceRequest, Reply]]) -> None:
    """Worker side: every reply of a batch in one round trip, each expiring if nobody reads it."""
    pipe = redis.pipeline(transaction=False)
    for request, reply in replies:
        pipe.rpush(request.reply_key, reply.encode())
        pipe.expire(request.reply_key, REPLY_TTL_S)
    pipe.execute()


SAFE_EVICTION_POLICY = "noeviction"


def memory_policy_warnings(config: dict) -> list[str]:
    """What is unsafe in a Redis server's memory settings (`CONFIG GET maxmemory*` as a dict).

    Celery's queues are lists without a TTL and the inference queues expire, so any eviction policy
    (allkeys-* drops Celery tasks, volatile-* drops queued inference requests) can lose work; with
    `noeviction` a full Redis refuses new writes (a clear error) and keeps every queue."""
    decoded = {
        (k.decode() if isinstance(k, bytes) else str(k)): (v.decode() if isinstance(v, bytes) else str(v))
        for k, v in config.items()
    }
    warnings = []
    policy = decoded.get("maxmemory-policy", "")
    if policy and policy != SAFE_EVICTION_POLICY:
        warnings.append(
            f"Redis maxmemory-policy is {policy!r}: under memory pressure it can evict queued Celery tasks or "
            f"inference requests; set it to {SAFE_EVICTION_POLICY!r} (CONFIG SET maxmemory-policy noeviction)"
        )
    if decoded.get("maxmemory", "0") in ("0", ""):
        warnings.append("Redis has no maxmemory cap: one flood can use all of the machine's memory; set maxmemory")
    return warnings


def check_memory_policy(redis, log) -> list[str]:
    """Log a warning for each unsafe memory setting of the server behind `redis` (sync client)."""
    try:
        config = redis.config_get("maxmemory*")
    except RedisError as exc:  # CONFIG may be disabled on managed servers
        log.info("could not read Redis memory settings (%s); make sure maxmemory-policy is noeviction", exc)
        return []
    warnings = memory_policy_warnings(config)
    for warning in warnings:
        log.warning(warning)
    return warnings
