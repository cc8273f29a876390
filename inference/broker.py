"""The Redis protocol between web processes and inference workers. No Django.

Web side: LPUSH a request onto the deployment's list `rs:inf:q:<name>`, then BLPOP the request's own
reply key with a timeout. Worker side: BRPOP (oldest first), batch, score, RPUSH each reply and let it
expire. A request carries the deployment version the web side saw (the worker reloads when it is newer
than its model), the batching policy and a deadline after which nobody waits for the answer (the worker
skips it). Replies carry per-item results only; rewards are computed where the settings live.

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


def _push_and_wait(pipe, request: InferenceRequest, timeout: float):
    """Queue the request and wait for its reply in one round trip (sync or asyncio pipeline)."""
    pipe.lpush(queue_key(request.deployment), request.encode())
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
    BLPOP short); the command's own timeout bounds the wait."""
    if asyncio:
        import redis.asyncio as aredis

        return aredis.Redis.from_url(url, socket_timeout=None, socket_keepalive=True)
    import redis

    return redis.Redis.from_url(url, socket_timeout=None, socket_keepalive=True)


class BrokerClient:
    """Web side, blocking (redis-py). Thread-safe: each call borrows a pooled connection."""

    def __init__(self, redis):
        self.redis = redis

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
            got = _push_and_wait(self.redis.pipeline(transaction=False), request, timeout).execute()[1]
        except RedisError as exc:
            raise BrokerError(f"Redis is unavailable: {exc}") from None
        return _reply(got, deployment, timeout)


class AsyncBrokerClient:
    """Web side, asyncio (redis.asyncio), for consumers and async views."""

    def __init__(self, redis):
        self.redis = redis

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
            got = (await _push_and_wait(self.redis.pipeline(transaction=False), request, timeout).execute())[1]
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
