"""The Redis protocol between web processes and inference workers. No Django.

Web side: LPUSH a request onto the deployment's list `rs:inf:q:<name>`, then BLPOP the request's own
reply key with a timeout. Worker side: BRPOP (oldest first), batch, score, RPUSH each reply and let it
expire. A request carries the deployment version the web side saw (the worker reloads when it is newer
than its model), the batching policy and a deadline after which nobody waits for the answer (the worker
skips it). Replies carry per-item results only; rewards are computed where the settings live.

Bounds: a deployment's queue holds at most `max_queue` requests, and one client at most `max_per_client`
of them (so a flooding client leaves room for the others); a request over either limit is answered at
once with an error reply naming it, which the web side turns into a 503. The queue (and its per-client
counts, decremented by the worker as it pops) expires `queue_ttl_s` after the last push, so a queue
nobody serves does not stay in Redis.

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
from functools import lru_cache
from typing import Any

import numpy as np
from redis.exceptions import RedisError

from .npy_header import npy_array

QUEUE_PREFIX = "rs:inf:q:"
REPLY_PREFIX = "rs:inf:r:"
SHARE_PREFIX = "rs:inf:share:"
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


def share_key(deployment: str) -> str:
    """Hash of client -> requests it has waiting in the deployment's queue."""
    return SHARE_PREFIX + deployment


@dataclass
class InferenceRequest:
    deployment: str
    version: int
    payload: bytes  # .npy bytes
    deadline: float  # unix time after which nobody waits for the reply
    max_batch_size: int = 64
    max_wait_ms: float = 2.0
    client: str = ""  # who asks (e.g. "a12" for agent 12): counted against its share of the queue
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
            "client": self.client,
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
                client=str(header.get("client") or ""),
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
    """The array of an `.npy` body (np.save's header form read fast, any other by numpy)."""
    array = npy_array(raw)
    return array if array is not None else np.load(io.BytesIO(raw), allow_pickle=False)


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
local function refuse(message)
  redis.call('RPUSH', KEYS[2], message)
  redis.call('EXPIRE', KEYS[2], ARGV[5])
  return -1
end
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[2]) then return refuse(ARGV[4]) end
if ARGV[6] ~= '' and tonumber(redis.call('HGET', KEYS[3], ARGV[6]) or '0') >= tonumber(ARGV[7]) then
  return refuse(ARGV[8])
end
local n = redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
if ARGV[6] ~= '' then
  redis.call('HINCRBY', KEYS[3], ARGV[6], 1)
  redis.call('EXPIRE', KEYS[3], ARGV[3])
end
return n
"""


@dataclass(frozen=True)
class QueueBounds:
    max_queue: int = 1000  # requests waiting per deployment
    queue_ttl_s: int = 120  # the queue key expires this long after its last push
    max_per_client: int = 250  # requests one client may have waiting per deployment


def queue_full_message(deployment: str, max_queue: int) -> str:
    return (
        f"the inference queue of deployment {deployment!r} is full ({max_queue} requests waiting, "
        "INFERENCE_QUEUE_MAX): the workers are behind; retry shortly"
    )


def share_full_message(deployment: str, max_per_client: int) -> str:
    return (
        f"this client already has {max_per_client} requests waiting for deployment {deployment!r} "
        "(INFERENCE_CLIENT_QUEUE_MAX): wait for their answers before sending more"
    )


@lru_cache(maxsize=256)
def _refusals(deployment: str, bounds: QueueBounds) -> tuple[bytes, bytes]:
    """The encoded "queue full" and "client share full" replies (built once per deployment and bounds)."""
    return (
        Reply(None, queue_full_message(deployment, bounds.max_queue)).encode(),
        Reply(None, share_full_message(deployment, bounds.max_per_client)).encode(),
    )


def _push_and_wait(pipe, request: InferenceRequest, timeout: float, bounds: QueueBounds):
    """Queue the request (if its queue has room) and wait for its reply in one round trip."""
    full, share_full = _refusals(request.deployment, bounds)
    pipe.eval(
        _PUSH_IF_ROOM,
        3,
        queue_key(request.deployment),
        request.reply_key,
        share_key(request.deployment),
        request.encode(),
        bounds.max_queue,
        bounds.queue_ttl_s,
        full,
        REPLY_TTL_S,
        request.client,
        bounds.max_per_client,
        share_full,
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
    """Web side, blocking Redis (redis-py) for sync reads. Thread-safe: each call borrows a pooled
    connection. Requests are submitted only through AsyncBrokerClient (sync code: `async_to_sync`)."""

    def __init__(self, redis):
        self.redis = redis


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
        client: str = "",
    ) -> Reply:
        request = _request(deployment, version, payload, timeout, max_batch_size, max_wait_ms)
        request.client = client
        try:
            got = (
                await _push_and_wait(self.redis.pipeline(transaction=False), request, timeout, self.bounds).execute()
            )[1]
        except RedisError as exc:
            raise BrokerError(f"Redis is unavailable: {exc}") from None
        return _reply(got, deployment, timeout)


_RELEASE = """
for i = 1, #ARGV, 2 do
  if redis.call('HINCRBY', KEYS[1], ARGV[i], -tonumber(ARGV[i + 1])) <= 0 then
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
"""


def shares_release(redis, deployment: str, requests: list[InferenceRequest]) -> None:
    """Worker side: the popped requests no longer count against their clients' shares. `redis` may be a
    pipeline (the worker queues the release with its batch's replies: no round trip of its own)."""
    counts: dict[str, int] = {}
    for request in requests:
        if request.client:
            counts[request.client] = counts.get(request.client, 0) + 1
    if counts:
        args = [x for client, n in counts.items() for x in (client, n)]
        redis.eval(_RELEASE, 1, share_key(deployment), *args)


def replies_queue(pipe, replies: list[tuple[InferenceRequest, Reply]]) -> None:
    """Worker side: add every reply of a batch to a pipeline, each expiring if nobody reads it."""
    for request, reply in replies:
        pipe.rpush(request.reply_key, reply.encode())
        pipe.expire(request.reply_key, REPLY_TTL_S)


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
