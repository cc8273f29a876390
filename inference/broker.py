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

Payloads live in Redis under their own keys (`rs:inf:p:<id>`), written with a plain SET in the same
round trip as the push; the queue itself holds only small headers, and the Lua script that checks room
moves ids, never payload bytes (a payload passed as a script argument is copied into Lua and again into
the list: a 1 GB Redis peaked at 2.39 GB). Byte budgets beside the counts: a deployment's queue holds
at most `max_queue_bytes` of payloads, and one client at most `max_client_bytes` of them.

A push that Redis refuses (at its `maxmemory`, policy noeviction: OOM) is answered at once with a
BrokerError (a 503), not after the reply timeout. Pipelines that carry payloads never let redis-py raise
on a failed command: its error message renders every argument of the command through `textwrap`, which
for a 150 MB payload held the web process's event loop for minutes (pages included); `pipeline_run`
checks the replies itself.

A model loading on demand does not time out the requests waiting for it: a request sent before its model
was ready waits its whole timeout from the moment it was ready (`deadline_from_ready`, the same rule on
both sides), and the web side keeps waiting while a live worker says it is loading the deployment, at most
`load_wait_s` past the request's own timeout (INFERENCE_LOAD_WAIT_S).

Message layout: 4-byte big-endian header length, JSON header, then the payload when it travels inline
(tests, old messages): a `.npy` array (uint8, first axis = items), read with `allow_pickle=False`. A
header with `payload_key` has its payload under that key; `items` and `pixels` let a worker form a
batch (INFERENCE_BATCH_MAX_PIXELS) before reading any payload.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from redis.exceptions import OutOfMemoryError, RedisError

from common.redis_clients import POOL_EXHAUSTED, PoolSize, pool_exhausted
from inference.wire.npy_header import npy_array, npy_header

from .shm.frames import ShmDescriptor, segment_maps

QUEUE_PREFIX = "rs:inf:q:"
REPLY_PREFIX = "rs:inf:r:"
PAYLOAD_PREFIX = "rs:inf:p:"
SHARE_PREFIX = "rs:inf:share:"
WORKERS_KEY = "rs:inf:workers"
INFLIGHT_KEY = "rs:inf:inflight"  # hash: "*b" -> payload bytes waiting in every queue, "p<project>" -> a project's
SAMPLE_COUNTER_PREFIX = "rs:inf:served:"
HISTORY_PREFIX = "rs:inf:hist:"
ALIVE_PREFIX = "rs:inf:alive:"  # exists while a worker's process lives (refreshed by its own thread)
LOADING_PREFIX = "rs:inf:loading:"  # hash per deployment: worker -> when it started loading the model
READY_PREFIX = "rs:inf:ready:"  # per deployment: when a worker last finished loading its model (unix time)
READY_TTL_S = 24 * 3600
REPLY_TTL_S = 60
LARGE_PAYLOAD_BYTES = 1024 * 1024  # payloads this large are written from a thread (`payload_redis_from_url`)
WORKER_ALIVE_S = 30.0  # a worker's heartbeat is this fresh while it runs (loading a model included)
_HEADER_LEN = struct.Struct(">I")


class BrokerError(Exception):
    """Inference did not produce a result; the message says why (fit for a 503)."""


class WorkerError(BrokerError):
    """The worker answered with an error, e.g. the model failed to load."""


class InferenceTimeout(BrokerError):
    """No worker answered in time."""


class QueueFull(WorkerError):
    """The queue's bounds refused the request (the workers are behind): answered at once, worth a retry."""


class RequestRejected(BrokerError):
    """The worker refused what the request holds (a VLM window its model's layout cannot take): the client's
    fault, answered 400 by the reward endpoints, never worth a retry."""


class PoolExhausted(BrokerError):
    """Every Redis connection of this web process stayed in use past REDIS_POOL_TIMEOUT_S: worth a retry."""


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
    payload: bytes | bytearray  # .npy bytes (a bytearray once a worker read it from Redis, or from a large body)
    deadline: float  # unix time after which nobody waits for the reply
    max_batch_size: int = 64
    max_wait_ms: float = 2.0
    client: str = ""  # who asks (e.g. "a12" for agent 12): counted against its share of the queue
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    enqueued_at: float = field(default_factory=time.time)
    payload_key: str = ""  # where the payload is when it does not travel inline
    nbytes: int = -1  # payload bytes (counted against the byte budgets)
    items: int = -1  # items in the payload (first axis); -1: read from the payload
    pixels: int = -1  # uint8 RGB pixels in it (bytes / 3); -1: read from the payload
    attempts: int = 0  # times a worker took it and died before answering
    shm: dict | None = None  # same-host frames: the client's segment (inference.shm.frames), no payload bytes
    project: str = ""  # whose share of the global in-flight budget it counts against ("p<id>"; "" none)
    message: bytes = field(default=b"", repr=False, compare=False)  # the queue message it was decoded from
    _array: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.nbytes < 0 and self.payload:
            self.nbytes = len(self.payload)

    @property
    def reply_key(self) -> str:
        return REPLY_PREFIX + self.id

    def describe_payload(self) -> None:
        """Fill `items` and `pixels` from the payload's `.npy` header, without reading (or copying) its data:
        on the event loop, `array` (a writable copy) held a web process's pages for seconds per 154 MB payload.
        A payload in another `.npy` form is read by numpy."""
        header = npy_header(self.payload) if self.shm is None else None
        shape = tuple(self.shm["shape"]) if self.shm is not None else header.shape if header else self.array.shape
        if self.shm is not None:
            self.nbytes = math.prod(shape)  # counted against the byte budgets like a payload of those frames
        self.items = max(1, int(shape[0])) if shape else 1
        self.pixels = max(1, math.prod(shape) // 3)

    @property
    def array(self) -> np.ndarray:
        if self._array is None and self.shm is not None:
            self._array = segment_maps.array(ShmDescriptor.from_header(self.shm))
        if self._array is None:
            self._array = load_npy(self.payload)
        return self._array

    def encode(self, *, inline: bool = True) -> bytes:
        """The queue message; with `inline=False` only the header (the payload is under `payload_key`)."""
        header = {
            "id": self.id,
            "deployment": self.deployment,
            "version": self.version,
            "deadline": self.deadline,
            "max_batch_size": self.max_batch_size,
            "max_wait_ms": self.max_wait_ms,
            "enqueued_at": self.enqueued_at,
            "client": self.client,
            "nbytes": self.nbytes,
            "items": self.items,
            "pixels": self.pixels,
            "attempts": self.attempts,
            "project": self.project,
        }
        if not inline:
            header["payload_key"] = self.payload_key
        if self.shm is not None:
            header["shm"] = self.shm
        raw = json.dumps(header).encode()
        return _HEADER_LEN.pack(len(raw)) + raw + (self.payload if inline else b"")

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
                payload_key=str(header.get("payload_key") or ""),
                nbytes=int(header.get("nbytes", -1)),
                items=int(header.get("items", -1)),
                pixels=int(header.get("pixels", -1)),
                attempts=int(header.get("attempts", 0)),
                shm=header.get("shm"),
                project=str(header.get("project") or ""),
                message=bytes(message),
            )
        except (struct.error, ValueError, KeyError, TypeError) as exc:
            raise MessageError(f"malformed inference request: {exc}") from None


@dataclass
class Reply:
    results: list[Any] | None
    error: str = ""
    version: int = 0
    worker: str = ""
    busy: bool = False  # a refusal by the queue's bounds (never sent: the web side makes it)
    rejected: bool = False  # the worker refused the request's content (RequestRejected)

    def encode(self) -> bytes:
        reply = {"results": self.results, "error": self.error, "version": self.version, "worker": self.worker}
        return json.dumps({**reply, "rejected": True} if self.rejected else reply).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Reply:
        data = json.loads(raw)
        return cls(
            data.get("results"),
            data.get("error") or "",
            int(data.get("version") or 0),
            data.get("worker") or "",
            rejected=bool(data.get("rejected")),
        )

    def unwrap(self) -> list[Any]:
        if self.busy:
            raise QueueFull(self.error)
        if self.rejected:
            raise RequestRejected(self.error)
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


def deadline_from_ready(enqueued_at: float, deadline: float, ready_at: float) -> float:
    """A request sent before its model was ready (`ready_at`, 0 if unknown) waits its whole timeout
    from when the model was ready, not from when it was sent."""
    return deadline + (ready_at - enqueued_at) if ready_at > enqueued_at else deadline


def dump_npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def load_npy(raw: bytes | bytearray) -> np.ndarray:
    """The array of an `.npy` body (np.save's header form read fast, as a view of `raw`; any other by numpy)."""
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


# The payload was SET under KEYS[4] just before (same round trip). Push its header if the queue and the
# client's share have room, counting requests and bytes; else drop the payload and say why (a negative code).
# ARGV: header, max queue, ttl s, client, max per client, payload bytes, max client bytes, max queue bytes,
# project ("p<id>" or ""), max in-flight bytes, max project in-flight bytes, reserved ("1": a large payload's
# in-flight bytes were reserved before its SET, `_RESERVE_INFLIGHT`; given back on a refusal). It runs at
# Redis' maxmemory (allow-oom) once the payload's SET went through: its own writes are a header and counts, and
# a refusal must give its reservation back.
_PUSH_IF_ROOM = """#!lua flags=allow-oom
local nbytes = tonumber(ARGV[6])
local function give_back(name)
  if redis.call('HINCRBY', KEYS[5], name, -nbytes) <= 0 then redis.call('HDEL', KEYS[5], name) end
end
local function refuse(code)
  redis.call('DEL', KEYS[4])
  if ARGV[12] == '1' then
    give_back('*b')
    if ARGV[9] ~= '' then give_back(ARGV[9]) end
  end
  return code
end
if redis.call('EXISTS', KEYS[4]) == 0 then return refuse(-4) end
if ARGV[12] ~= '1' then
  if tonumber(redis.call('HGET', KEYS[5], '*b') or '0') + nbytes > tonumber(ARGV[10]) then return refuse(-6) end
  if ARGV[9] ~= '' and tonumber(redis.call('HGET', KEYS[5], ARGV[9]) or '0') + nbytes > tonumber(ARGV[11]) then
    return refuse(-7)
  end
end
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[2]) then return refuse(-1) end
if ARGV[4] ~= '' then
  if tonumber(redis.call('HGET', KEYS[3], ARGV[4]) or '0') >= tonumber(ARGV[5]) then return refuse(-2) end
  if tonumber(redis.call('HGET', KEYS[3], ARGV[4] .. '*b') or '0') + nbytes > tonumber(ARGV[7]) then
    return refuse(-5)
  end
end
if tonumber(redis.call('HGET', KEYS[3], '*b') or '0') + nbytes > tonumber(ARGV[8]) then return refuse(-3) end
local n = redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('HINCRBY', KEYS[3], '*b', nbytes)
if ARGV[4] ~= '' then
  redis.call('HINCRBY', KEYS[3], ARGV[4], 1)
  redis.call('HINCRBY', KEYS[3], ARGV[4] .. '*b', nbytes)
end
redis.call('EXPIRE', KEYS[3], ARGV[3])
if ARGV[12] ~= '1' then
  redis.call('HINCRBY', KEYS[5], '*b', nbytes)
  if ARGV[9] ~= '' then redis.call('HINCRBY', KEYS[5], ARGV[9], nbytes) end
end
redis.call('EXPIRE', KEYS[5], ARGV[3])
return n
"""

# A large payload's bytes reserved in the global in-flight budget before it is written (so concurrent large
# bodies cannot all land in Redis before one check refuses them: Redis checks maxmemory only before a
# command, and each SET passed it). KEYS: the in-flight hash. ARGV: bytes, project, max, project max, ttl s.
_RESERVE_INFLIGHT = """
local nbytes = tonumber(ARGV[1])
if tonumber(redis.call('HGET', KEYS[1], '*b') or '0') + nbytes > tonumber(ARGV[3]) then return -6 end
if ARGV[2] ~= '' and tonumber(redis.call('HGET', KEYS[1], ARGV[2]) or '0') + nbytes > tonumber(ARGV[4]) then
  return -7
end
redis.call('HINCRBY', KEYS[1], '*b', nbytes)
if ARGV[2] ~= '' then redis.call('HINCRBY', KEYS[1], ARGV[2], nbytes) end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""

MiB = 1024 * 1024


@dataclass(frozen=True)
class QueueBounds:
    max_queue: int = 1000  # requests waiting per deployment
    queue_ttl_s: int = 120  # the queue key expires this long after its last push
    max_per_client: int = 250  # requests one client may have waiting per deployment
    max_queue_bytes: int = 512 * MiB  # payload bytes waiting per deployment
    max_client_bytes: int = 256 * MiB  # payload bytes one client may have waiting per deployment
    max_inflight_bytes: int = 384 * MiB  # payload bytes waiting in every queue together
    max_project_inflight_bytes: int = 192 * MiB  # payload bytes one project's clients may have waiting, all queues


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


def refusal_message(code: int, deployment: str, bounds: QueueBounds, nbytes: int) -> str:
    """Why the push script refused a request (its negative return code)."""
    if code == -1:
        return queue_full_message(deployment, bounds.max_queue)
    if code == -2:
        return share_full_message(deployment, bounds.max_per_client)
    if code == -3:
        return (
            f"the inference queue of deployment {deployment!r} holds its most payload bytes "
            f"({bounds.max_queue_bytes} bytes, INFERENCE_QUEUE_MAX_BYTES; this request has {nbytes}): "
            "the workers are behind; retry shortly"
        )
    if code == -5:
        return (
            f"this client's requests waiting for deployment {deployment!r} would exceed "
            f"{bounds.max_client_bytes} payload bytes (INFERENCE_CLIENT_QUEUE_MAX_BYTES; this request has "
            f"{nbytes}): wait for their answers, or send fewer or smaller images"
        )
    if code == -6:
        return (
            f"the inference queues of all deployments hold their most payload bytes ({bounds.max_inflight_bytes} "
            f"bytes, INFERENCE_INFLIGHT_MAX_BYTES; this request has {nbytes}): the workers are behind; retry shortly"
        )
    if code == -7:
        return (
            f"this project's requests waiting for inference would exceed {bounds.max_project_inflight_bytes} payload "
            f"bytes (INFERENCE_PROJECT_INFLIGHT_MAX_BYTES; this request has {nbytes}): wait for their answers, "
            "or send fewer or smaller images"
        )
    return REDIS_REFUSED


REDIS_REFUSED = (
    "Redis refused to store the request (it is at its maxmemory; see the Redis settings in docs/operations.md): "
    "retry shortly, and raise Redis' maxmemory or lower the inference byte budgets if this persists"
)


REPLY_LOST = (
    "an inference worker scored the request but Redis refused to store its reply (it is at its maxmemory; "
    "see the Redis settings in docs/operations.md): retry shortly"
)
REPLY_CHECK_S = 2.0  # how often a request waiting for its reply checks that the reply was not lost
REPLY_GRACE_S = 2.0  # its payload gone, how long it waits for the reply before calling it lost


class RedisRefused(BrokerError):
    """Redis refused a write (out of memory or another command error): answered at once."""


def pipeline_run(results: list[Any]) -> list[Any]:
    """The replies of `pipe.execute(raise_on_error=False)`, raising RedisRefused for the first failed
    command without rendering its arguments (redis-py's own annotation would `textwrap` every payload)."""
    for result in results:
        if isinstance(result, RedisError):
            first_line = str(result.args[0] if result.args else result).splitlines()[0][:200]
            if isinstance(result, OutOfMemoryError):
                raise RedisRefused(REDIS_REFUSED)
            raise RedisRefused(f"Redis refused a command: {result.__class__.__name__}: {first_line}")
    return results


def _reply(got, deployment: str, timeout: float) -> Reply:
    if got is None:
        raise InferenceTimeout(
            f"no inference worker answered for deployment {deployment!r} within {timeout:g} s (is one running?)"
        )
    return Reply.decode(got[1])


class AsyncBrokerClient:
    """Web side, asyncio (redis.asyncio), for consumers and async views."""

    def __init__(
        self,
        redis,
        bounds: QueueBounds | None = None,
        payload_redis=None,
        pool: PoolSize | None = None,
        load_wait_s: float = 0.0,
    ):
        self.redis = redis
        self.bounds = bounds or QueueBounds()
        self.load_wait_s = load_wait_s  # most a request waits past its timeout while its model loads
        self.pool = pool or PoolSize()  # the size `redis`'s pool was made with (for the 503's message)
        self.payload_redis = payload_redis  # blocking, `payload_redis_from_url`: writes large payloads

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
        bounds: QueueBounds | None = None,
        shm: dict | None = None,
        project: int | None = None,
    ) -> Reply:
        """Store the payload, queue its header if there is room (one round trip), then wait for the
        reply. A refusal (no room, a byte budget, Redis out of memory) is answered at once: a Reply with
        the reason as its error (`busy`: its unwrap raises QueueFull), or a BrokerError. A payload of LARGE_PAYLOAD_BYTES or more is written
        from a thread (`payload_redis`), so the event loop never copies it."""
        request = _request(deployment, version, payload, timeout, max_batch_size, max_wait_ms)
        request.client = client
        request.shm = shm  # same-host frames: the payload is empty, the header names the client's segment
        request.project = f"p{project}" if project is not None else ""
        request.payload_key = PAYLOAD_PREFIX + request.id
        request.describe_payload()
        bounds = bounds or self.bounds
        ttl_s = int(timeout + self.load_wait_s) + REPLY_TTL_S  # the payload outlives every wait for its reply
        try:
            if self.payload_redis is not None and len(payload) >= LARGE_PAYLOAD_BYTES:
                stored, code = await asyncio.to_thread(_store_and_push_sync, self.payload_redis, request, bounds, ttl_s)
            else:
                pipe = self.redis.pipeline(transaction=False)
                _store_and_push(pipe, request, bounds, ttl_s)
                stored, code = await pipe.execute(raise_on_error=False)
            if isinstance(code, RedisError) and stored is True:  # stored, then refused: do not keep it
                await self.redis.delete(request.payload_key)
            code = pipeline_run([stored, code])[1]
            if code < 0:
                if code == -4:
                    raise RedisRefused(REDIS_REFUSED)
                return Reply(None, refusal_message(code, deployment, bounds, request.nbytes), busy=True)
            got = await self._reply_wait(request, timeout)
        except RedisRefused:
            raise
        except RedisError as exc:
            error = PoolExhausted if POOL_EXHAUSTED in str(exc) else BrokerError
            raise error(pool_exhausted(exc, self.pool)) from None
        return _reply(got, deployment, timeout)

    async def _reply_wait(self, request: InferenceRequest, timeout: float):
        """BLPOP the reply until the request's timeout, extended while its model loads (see the module). Every
        REPLY_CHECK_S without a reply it looks whether the request's payload is still there: a worker deletes it
        in the round trip that stores the reply, so a payload gone with no reply REPLY_GRACE_S later means Redis
        refused the reply (RedisRefused at once, not a timeout minutes later)."""
        end = request.enqueued_at + timeout
        latest = end + self.load_wait_s
        while True:
            left = end - time.time()
            if left > 0:
                got = await self.redis.blpop([request.reply_key], timeout=max(0.01, min(left, REPLY_CHECK_S)))
                if got is not None:
                    return got
                if left > REPLY_CHECK_S:
                    got = await self._reply_lost_check(request)
                    if got is not None:
                        return got
                    continue
            extended = await self._model_wait_end(request, timeout)
            if extended is None or min(extended, latest) <= time.time():
                return None
            end = min(extended, latest)

    async def _reply_lost_check(self, request: InferenceRequest):
        """None while the request's payload waits for a worker; once it is gone, the reply (which a worker
        stores in the same round trip), or RedisRefused when none comes within REPLY_GRACE_S."""
        if await self.redis.exists(request.payload_key):
            return None
        got = await self.redis.blpop([request.reply_key], timeout=REPLY_GRACE_S)
        if got is None:
            raise RedisRefused(REPLY_LOST)
        return got

    async def _model_wait_end(self, request: InferenceRequest, timeout: float) -> float | None:
        """When the wait for this request now ends given its model: its timeout counted from when the model
        was ready, or a few seconds more while a live worker loads it; None when neither applies."""
        if self.load_wait_s <= 0:
            return None
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(READY_PREFIX + request.deployment)
        pipe.hkeys(LOADING_PREFIX + request.deployment)
        ready, loaders = await pipe.execute()
        end = deadline_from_ready(request.enqueued_at, request.enqueued_at + timeout, float(ready or 0))
        if loaders and await self.redis.exists(*[ALIVE_PREFIX + _text(w) for w in loaders]):
            end = max(end, time.time() + 2.0)  # look again in 2 s
        return end if end > request.enqueued_at + timeout else None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _store_and_push(
    pipe, request: InferenceRequest, bounds: QueueBounds, ttl_s: int, *, reserved: bool = False
) -> None:
    """Queue on `pipe` (sync or asyncio) the SET of the request's payload and the push of its header."""
    pipe.set(request.payload_key, request.payload, ex=ttl_s)
    pipe.eval(
        _PUSH_IF_ROOM,
        5,
        queue_key(request.deployment),
        request.reply_key,
        share_key(request.deployment),
        request.payload_key,
        INFLIGHT_KEY,
        request.encode(inline=False),
        bounds.max_queue,
        bounds.queue_ttl_s,
        request.client,
        bounds.max_per_client,
        request.nbytes,
        bounds.max_client_bytes,
        bounds.max_queue_bytes,
        request.project,
        bounds.max_inflight_bytes,
        bounds.max_project_inflight_bytes,
        "1" if reserved else "0",
    )


def _store_and_push_sync(redis, request: InferenceRequest, bounds: QueueBounds, ttl_s: int) -> list[Any]:
    """A large payload: its bytes reserved in the global in-flight budget first (a refusal writes nothing), then
    `_store_and_push` in one round trip, on a blocking client (run in a thread)."""
    pipe = redis.pipeline(transaction=False)
    pipe.eval(
        _RESERVE_INFLIGHT,
        1,
        INFLIGHT_KEY,
        request.nbytes,
        request.project,
        bounds.max_inflight_bytes,
        bounds.max_project_inflight_bytes,
        bounds.queue_ttl_s,
    )
    (code,) = pipeline_run(pipe.execute(raise_on_error=False))  # Redis at its maxmemory: RedisRefused
    if code < 0:
        return [False, code]
    pipe = redis.pipeline(transaction=False)
    _store_and_push(pipe, request, bounds, ttl_s, reserved=True)
    return pipe.execute(raise_on_error=False)


# It only gives counts back, so it may run at Redis' maxmemory (allow-oom): a full Redis must not keep them.
_RELEASE = """#!lua flags=allow-oom
for i = 1, #ARGV, 2 do
  if redis.call('HINCRBY', KEYS[1], ARGV[i], -tonumber(ARGV[i + 1])) <= 0 then
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
"""


def shares_release(redis, deployment: str, requests: list[InferenceRequest]) -> None:
    """Worker side: the popped requests no longer count against their clients' shares, nor against the global
    in-flight budget. `redis` may be a pipeline (the worker queues the release with its batch's replies: no
    round trip of its own)."""
    counts: dict[str, int] = {}
    inflight: dict[str, int] = {}
    for request in requests:
        nbytes = max(0, request.nbytes) if request.payload_key else 0  # inline messages were not counted
        counts["*b"] = counts.get("*b", 0) + nbytes
        inflight["*b"] = inflight.get("*b", 0) + nbytes
        if request.project:
            inflight[request.project] = inflight.get(request.project, 0) + nbytes
        if request.client:
            counts[request.client] = counts.get(request.client, 0) + 1
            counts[request.client + "*b"] = counts.get(request.client + "*b", 0) + nbytes
    for key, given in ((share_key(deployment), counts), (INFLIGHT_KEY, inflight)):
        given = {k: n for k, n in given.items() if n}
        if given:
            redis.eval(_RELEASE, 1, key, *[x for name, n in given.items() for x in (name, n)])


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
