"""The inference worker loop: take requests from Redis, batch them, score, reply. No Django here.

Django-specific parts (which deployments exist, how a deployment's model loads, where health is
recorded) come in as callables, wired by `manage.py inference_worker`.

- Models load on demand, once per deployment, and reload when a request carries a newer deployment
  version. Requests that arrive while a model loads wait in Redis, so none is dropped.
- A model that fails to load is reported unhealthy with the error; requests for it are answered with
  that error (the web side turns it into a 503). Loading is retried after `retry_failed_s`, or at once
  when the deployment's version changes.
- Popped requests stop counting against their clients' queue shares when the batch's replies are sent
  (in the same round trip), so no Redis call stands between the pop and the forward pass.
- Requests whose deadline passed (the caller gave up) are skipped rather than scored.
- Batches stay within `max_batch_pixels` (INFERENCE_BATCH_MAX_PIXELS) as well as the deployment's
  `max_batch_size`: the worker forms a batch from the requests' headers, puts back what does not fit, and
  only then reads the chosen requests' payloads (stored apart from the queue, `inference.broker`).
- Nothing is lost when a worker dies (kill -9 included): every request it takes is kept in its held list
  (`rs:inf:held:<worker>`) until its reply is sent, and while it lives a thread keeps its alive key
  (`rs:inf:alive:<worker>`, ALIVE_TTL_S) fresh. Every worker, each second and when it starts, reclaims
  the held list of a worker whose alive key expired: each request goes back to the oldest end of its
  queue, once; a request whose worker died twice while holding it is answered with that reason (a 503),
  so that one poisonous request cannot kill every worker in turn. The one gap: a request BLMPOP handed
  to a worker that dies before its next Redis command (the hold, microseconds later) is lost.
- BLMPOP wakes the worker the moment a request arrives and takes what else is queued in the same round
  trip. Blocking timeouts have Redis' `hz` resolution (100 ms), so the short batching wait (`max_wait_ms`)
  polls with non-blocking RPOP instead.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from redis import Redis
from redis.exceptions import RedisError

from common import metrics
from inference.broker import (
    ALIVE_PREFIX,
    LOADING_PREFIX,
    READY_PREFIX,
    READY_TTL_S,
    WORKERS_KEY,
    InferenceRequest,
    MessageError,
    Reply,
    deadline_from_ready,
    queue_key,
    replies_queue,
    shares_release,
)
from inference.shm.frames import segment_maps
from inference.workers.batching import Batcher, BatchPolicy, score_requests
from inference.workers.payload_read import payloads_get
from training.kit.family_parts import Scorer
from training.vlm.wire import WireError

log = logging.getLogger(__name__)

LoadModel = Callable[[str], tuple[int, Scorer]]  # deployment name -> (version, scorer)
ReportHealth = Callable[[str, int | None, str], None]  # (deployment, version, error or "" when healthy)
ListDeployments = Callable[[], list[str]]

POLL_INTERVAL_S = 0.0002
HELD_PREFIX = "rs:inf:held:"  # a worker's requests taken and not yet answered
HOLDERS_KEY = "rs:inf:holders"  # workers that may hold requests
ALIVE_TTL_S = 3.0
MAX_ATTEMPTS = 2  # workers that may die holding one request before it is answered with an error
DIED_TWICE = (
    "the inference workers serving this request died twice while holding it (killed, or out of memory?): "
    "it is not retried again; see the inference worker's log"
)

# Move up to ARGV[1] requests from the queue to the worker's held list: what the worker pops is held atomically.
_POP_AND_HOLD = """
local taken = redis.call('RPOP', KEYS[1], ARGV[1])
if taken then redis.call('RPUSH', KEYS[2], unpack(taken)) end
return taken
"""


@dataclass
class LoadedModel:
    version: int
    scorer: Scorer | None
    error: str = ""
    failed_at: float = 0.0


class RedisQueue:
    """One deployment's request list as a batching Source; what it pops goes to the worker's held list."""

    def __init__(self, redis, deployment: str, held_key: str):
        self.redis = redis
        self.key = queue_key(deployment)
        self.held_key = held_key

    def _pop(self, count: int) -> list[bytes]:
        return self.redis.eval(_POP_AND_HOLD, 2, self.key, self.held_key, count) or []

    def pop_now(self, max_count: int) -> list[InferenceRequest]:
        return [r for r in map(decode_request, self._pop(max_count)) if r is not None]

    def pop_wait(self, timeout_s: float) -> InferenceRequest | None:
        deadline = time.monotonic() + timeout_s
        while True:
            for message in self._pop(1):
                request = decode_request(message)
                if request is not None:
                    return request
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_INTERVAL_S)


@dataclass
class InferenceWorker:
    redis: Redis
    load_model: LoadModel
    report_health: ReportHealth
    list_deployments: ListDeployments
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    refresh_s: float = 1.0
    wake_count: int = 64  # requests taken at once when woken (larger batches are scored in chunks)
    retry_failed_s: float = 5.0
    max_batch_pixels: int = 0  # uint8 RGB pixels per batch (0: no cap)
    device: str = ""  # where it scores, in its heartbeat (a deployment in fp16 needs a worker on a GPU)
    models: dict[str, LoadedModel] = field(default_factory=dict)
    ready_at: dict[str, float] = field(default_factory=dict)  # deployment -> when its model was last loaded
    batchers: dict[str, Batcher] = field(default_factory=dict)
    served: int = 0  # requests answered
    items: int = 0  # items (images, windows) in them
    batches: int = 0  # batches they were answered in (items / batches = mean forward batch size)
    _deployments: list[str] = field(default_factory=list)
    _refreshed_at: float = 0.0
    _turn: int = 0
    _waiting: tuple[bytes, list[bytes]] | None = None  # taken with the last replies: the next call serves them
    _released: list[tuple[str, list[InferenceRequest]]] = field(default_factory=list)  # shares to give back

    @property
    def held_key(self) -> str:
        return HELD_PREFIX + self.worker_id

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        log.info("inference worker %s started", self.worker_id)
        beating = threading.Thread(target=self._stay_alive, args=(stop,), name="alive", daemon=True)
        self._stay_alive_once()
        beating.start()
        while not stop.is_set():
            try:
                self.poll_once(timeout_s=1.0)
            except Exception:  # keep serving other requests; the traceback goes to the log
                log.exception("inference worker loop error")
                time.sleep(0.5)
        self._give_back_waiting()
        pipe = self.redis.pipeline(transaction=False)
        self._release_shares(pipe)
        pipe.hdel(WORKERS_KEY, self.worker_id)
        pipe.delete(self.held_key, ALIVE_PREFIX + self.worker_id)
        pipe.srem(HOLDERS_KEY, self.worker_id)
        pipe.execute()
        beating.join(5)

    def _stay_alive_once(self) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(ALIVE_PREFIX + self.worker_id, "1", px=int(ALIVE_TTL_S * 1000))
        pipe.sadd(HOLDERS_KEY, self.worker_id)
        pipe.execute()

    def _stay_alive(self, stop: threading.Event) -> None:
        """The alive key, refreshed three times per ALIVE_TTL_S on its own thread (model loads and long
        forward passes included), until the worker stops."""
        while not stop.wait(ALIVE_TTL_S / 3):
            try:
                self._stay_alive_once()
            except Exception as exc:  # Redis away for a moment: the next beat tries again
                log.warning("could not refresh the alive key: %s", exc)

    def poll_once(self, timeout_s: float = 1.0) -> int:
        """Wait for one request, serve its batch; the number of requests answered. The batch's replies go
        out in the same round trip as the wait for the next request, which the next call serves."""
        if time.monotonic() - self._refreshed_at > self.refresh_s or not self._deployments:
            self._refresh()
            requests_reclaim(self.redis, self.worker_id)
        if not self._deployments:
            time.sleep(min(timeout_s, 0.5))
            return 0
        got, self._waiting = self._waiting or self._reply_and_wait([], timeout_s), None
        if not got:
            return 0
        key, messages = got
        deployment = key.decode()[len(queue_key("")) :]
        replies = self.serve(deployment, messages)
        if replies:
            self._waiting = self._reply_and_wait(replies, timeout_s)
        elif self._released:  # nothing to answer (their callers gave up): give the shares back now
            pipe = self.redis.pipeline(transaction=False)
            self._release_shares(pipe)
            pipe.execute()
        return len(replies)

    def _reply_and_wait(
        self, replies: list[tuple[InferenceRequest, Reply]], timeout_s: float
    ) -> tuple[bytes, list[bytes]] | None:
        """Send the replies and wait for the next request (BLMPOP takes whatever else is queued with it) in
        one round trip. The key order rotates so no deployment starves the others (BLMPOP serves the first
        non-empty key)."""
        self._turn = (self._turn + 1) % len(self._deployments)
        names = self._deployments[self._turn :] + self._deployments[: self._turn]
        keys = [queue_key(n) for n in names]
        pipe = self.redis.pipeline(transaction=False)
        self._release_shares(pipe)  # the batch's payloads go first: the room they free takes its replies
        first = len(pipe.command_stack)
        replies_queue(pipe, replies)
        pipe.delete(self.held_key)  # answered (the replies are in this round trip) or given up on
        pipe.blmpop(max(1, int(timeout_s)), len(keys), *keys, direction="RIGHT", count=self.wake_count)
        results = pipe.execute(raise_on_error=False)
        pushed = results[first : first + 2 * len(replies) : 2]  # each reply's RPUSH (then its EXPIRE)
        refused = [pair for pair, result in zip(replies, pushed, strict=True) if isinstance(result, RedisError)]
        if refused:
            self._replies_retry(refused)
        for result in results:
            if isinstance(result, RedisError) and result not in pushed:
                raise result
        got = cast(tuple[bytes, list[bytes]] | None, results[-1])  # a bytes client: the stubs allow str
        if got:
            pipe = self.redis.pipeline(transaction=False)
            pipe.rpush(self.held_key, *got[1])
            pipe.sadd(HOLDERS_KEY, self.worker_id)
            if any(isinstance(r, RedisError) for r in pipe.execute(raise_on_error=False)):
                # Redis at its maxmemory: serve them anyway (their payloads are freed with the replies); only a
                # death of this worker before it answers would lose them
                log.warning("Redis refused to record the %d requests this worker took; serving them", len(got[1]))
        return got

    def _replies_retry(self, refused: list[tuple[InferenceRequest, Reply]]) -> None:
        """Redis refused some replies (at its maxmemory): try once more, now that the batch's payloads are
        gone. A reply still refused is logged; its client, seeing its payload gone and no reply, answers at
        once that the reply was lost (`AsyncBrokerClient._reply_wait`), not after its timeout."""
        pipe = self.redis.pipeline(transaction=False)
        replies_queue(pipe, refused)
        results = pipe.execute(raise_on_error=False)
        for (request, _), result in zip(refused, results[::2], strict=True):
            if isinstance(result, RedisError):
                log.error(
                    "request %s: Redis refused its reply (%s); its client is told so", request.id, type(result).__name__
                )

    def _release_shares(self, pipe) -> None:
        """Queue the release of the served requests' client shares and payloads (sent with the replies,
        one round trip)."""
        for deployment, requests in self._released:
            shares_release(pipe, deployment, requests)
            payloads = [r.payload_key for r in requests if r.payload_key]
            if payloads:
                pipe.delete(*payloads)
        self._released.clear()

    def _give_back_waiting(self) -> None:
        """Requests taken for the next call go back to the (oldest) end of their queue when the worker stops."""
        if self._waiting:
            key, messages = self._waiting
            pipe = self.redis.pipeline(transaction=True)
            pipe.rpush(key, *reversed(messages))
            pipe.delete(self.held_key)
            pipe.execute()
            self._waiting = None

    def serve(self, deployment: str, messages: list[bytes]) -> list[tuple[InferenceRequest, Reply]]:
        """The replies to the batch that starts with these requests (not sent yet)."""
        decoded = [r for r in map(decode_request, messages) if r is not None]
        if not decoded:
            return []
        first = decoded[0]
        policy = BatchPolicy(max(1, first.max_batch_size), max(0.0, first.max_wait_ms))
        batcher = self.batchers.get(deployment)
        if batcher is None or batcher.policy != policy:
            batcher = self.batchers[deployment] = Batcher(
                policy, size=_item_count, pixels=_pixel_count, max_pixels=self.max_batch_pixels
            )
        drained = len(messages) < self.wake_count  # BLMPOP took everything that was queued
        source = RedisQueue(self.redis, deployment, self.held_key)
        requests, over = batcher.collect_within(first, source, decoded[1:], drained=drained)
        if over:  # past the pixel cap: back to the oldest end of the queue, in order, and no longer held
            over_messages = [r.message or r.encode(inline=not r.payload_key) for r in over]
            pipe = self.redis.pipeline(transaction=True)
            pipe.rpush(source.key, *reversed(over_messages))
            for message in over_messages:
                pipe.lrem(self.held_key, 1, message)  # type: ignore[arg-type]  # bytes are fine
            pipe.execute()
        self._payloads_read(requests)
        self._released.append((deployment, requests))  # sent with the replies, not before the forward
        now, ready_at = time.time(), self.ready_at.get(deployment, 0.0)
        live = [r for r in requests if deadline_from_ready(r.enqueued_at, r.deadline, ready_at) > now]
        if not live:
            return []
        replies = self._answer(deployment, live, policy)
        self.served += len(replies)
        self.items += sum(_item_count(r) for r in live)
        self.batches += 1
        return replies

    def _payloads_read(self, requests: list[InferenceRequest]) -> None:
        """Read the payloads stored apart (one round trip, each into a bytearray of its own: `payloads_get`);
        a missing one (expired) fails its request only."""
        stored = [r for r in requests if r.payload_key and not r.payload]
        if stored:
            for request, payload in zip(stored, payloads_get(self.redis, [r.payload_key for r in stored]), strict=True):
                request.payload = payload or b""

    def _answer(
        self, deployment: str, requests: list[InferenceRequest], policy: BatchPolicy
    ) -> list[tuple[InferenceRequest, Reply]]:
        model = self._model_for(deployment, max(r.version for r in requests))
        series = metrics.inference_series(deployment)
        now = time.time()
        for request in requests:
            series.queue_wait_seconds.observe(max(0.0, now - request.enqueued_at))
        if model.scorer is None:
            metrics.inference_errors.labels(deployment).inc(len(requests))
            return [(r, Reply(None, model.error, model.version, self.worker_id)) for r in requests]
        good, replies = [], []
        for request in requests:
            try:
                request.array  # noqa: B018 - decodes the payload, raising on a bad one
                good.append(request)
            except (ValueError, OSError, EOFError) as exc:
                replies.append((request, Reply(None, f"unreadable images: {exc}", model.version, self.worker_id)))
        return replies + self._score(deployment, model, good, policy)

    def _score(
        self, deployment: str, model: LoadedModel, requests: list[InferenceRequest], policy: BatchPolicy
    ) -> list[tuple[InferenceRequest, Reply]]:
        """One forward over `requests`; when it fails, each request again alone, so that one request's bad
        frames (a JPEG that will not decode) fail only that request."""
        if not requests:
            return []
        assert model.scorer is not None  # `_answer` answered the requests of a model that failed to load
        series = metrics.inference_series(deployment)
        try:
            started = time.monotonic()
            results = score_requests(
                [r.array for r in requests], model.scorer.score, policy.max_batch_size, self.max_batch_pixels
            )
            items = sum(_item_count(r) for r in requests)
            series.batch_seconds.observe(time.monotonic() - started)
            series.batch_size.observe(items)
            series.items.inc(items)
            return [
                (r, Reply(res, "", model.version, self.worker_id)) for r, res in zip(requests, results, strict=True)
            ]
        except Exception as exc:  # a scoring failure answers its own requests; the worker keeps going
            if len(requests) > 1:
                log.warning("a batch of deployment %s failed (%s); scoring its requests one by one", deployment, exc)
                return [reply for request in requests for reply in self._score(deployment, model, [request], policy)]
            if isinstance(exc, WireError):  # what the request holds, not the model: the client's error (a 400)
                log.warning("deployment %s refused a request: %s", deployment, exc)
                return [(r, Reply(None, str(exc), model.version, self.worker_id, rejected=True)) for r in requests]
            log.exception("scoring failed for deployment %s", deployment)
            metrics.inference_errors.labels(deployment).inc(len(requests))
            message = f"scoring failed: {exc.__class__.__name__}: {exc}"
            return [(r, Reply(None, message, model.version, self.worker_id)) for r in requests]

    def _retry_later(self, model: LoadedModel) -> bool:
        """A model that failed to load is retried only after retry_failed_s."""
        return time.monotonic() - model.failed_at < self.retry_failed_s

    def _model_for(self, deployment: str, wanted_version: int) -> LoadedModel:
        model = self.models.get(deployment)
        fresh = model is not None and model.version >= wanted_version
        if fresh and model is not None and (model.scorer is not None or self._retry_later(model)):
            return model
        try:
            self._heartbeat()  # loading may take a while: stay visibly alive
            started = time.monotonic()
            self.redis.hset(LOADING_PREFIX + deployment, self.worker_id, time.time())  # waiting requests wait on
            try:
                version, scorer = self.load_model(deployment)
            finally:
                self._loaded(deployment)
            model = LoadedModel(version, scorer)
            metrics.model_load_seconds.labels(deployment).observe(time.monotonic() - started)
            log.info("loaded deployment %s version %s in %.2fs", deployment, version, time.monotonic() - started)
            self.report_health(deployment, version, "")
        except Exception as exc:
            error = f"model failed to load: {exc.__class__.__name__}: {exc}"
            log.error("deployment %s: %s\n%s", deployment, error, traceback.format_exc())
            model = LoadedModel(wanted_version, None, error, time.monotonic())
            metrics.model_load_failures.labels(deployment).inc()
            self.report_health(deployment, None, error)
        self.models[deployment] = model
        return model

    def _loaded(self, deployment: str) -> None:
        """The load is over (done or failed): requests sent before now wait their timeout from now."""
        self.ready_at[deployment] = now = time.time()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hdel(LOADING_PREFIX + deployment, self.worker_id)
        pipe.set(READY_PREFIX + deployment, now, ex=READY_TTL_S)
        pipe.execute()

    def _refresh(self) -> None:
        segment_maps.sweep()  # same-host frames: let go of the segments of clients that closed them or died
        self._deployments = sorted(self.list_deployments())
        self._refreshed_at = time.monotonic()
        for gone in set(self.models) - set(self._deployments):
            del self.models[gone]
        self._heartbeat()

    def _heartbeat(self) -> None:
        heartbeat = {
            "at": time.time(),
            "served": self.served,
            "items": self.items,
            "batches": self.batches,
            "device": self.device,
            "models": {name: m.version for name, m in self.models.items() if m.scorer is not None},
        }
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(WORKERS_KEY, self.worker_id, json.dumps(heartbeat))
        pipe.set(ALIVE_PREFIX + self.worker_id, "1", px=int(ALIVE_TTL_S * 1000))
        pipe.execute()


def decode_request(message: bytes) -> InferenceRequest | None:
    try:
        return InferenceRequest.decode(message)
    except MessageError:
        log.warning("dropped a malformed inference request")
        return None


def _item_count(request: InferenceRequest) -> int:
    """Items in a request: from its header, else its array (a bad payload counts as one and fails later)."""
    if request.items >= 0:
        return max(1, request.items)
    try:
        return max(1, int(request.array.shape[0])) if request.array.ndim else 1
    except (ValueError, OSError, EOFError):
        return 1


def _pixel_count(request: InferenceRequest) -> int:
    """uint8 RGB pixels in a request (bytes / 3): from its header, else its payload's size."""
    return request.pixels if request.pixels >= 0 else max(1, len(request.payload) // 3)


def requests_reclaim(redis, reclaimer: str) -> int:
    """Requests held by workers whose alive key expired (killed, or stopped without cleaning up) go back
    to their queues, oldest end, once; a second time they are answered with DIED_TWICE. Returns how many
    were handled. Several reclaimers may run at once: RENAME hands a held list to exactly one."""
    handled = 0
    for raw in redis.smembers(HOLDERS_KEY):
        holder = raw.decode() if isinstance(raw, bytes) else str(raw)
        if holder == reclaimer or redis.exists(ALIVE_PREFIX + holder):
            continue
        claimed = f"{HELD_PREFIX}reclaim:{reclaimer}:{holder}"
        try:
            redis.rename(HELD_PREFIX + holder, claimed)
        except RedisError:  # nothing held, or another worker took it first
            redis.srem(HOLDERS_KEY, holder)
            continue
        pipe = redis.pipeline(transaction=True)
        for message in redis.lrange(claimed, 0, -1):
            request = decode_request(message)
            if request is None or request.deadline <= time.time():
                if request is not None:
                    shares_release(pipe, request.deployment, [request])
                continue
            handled += 1
            if request.attempts + 1 >= MAX_ATTEMPTS:
                log.warning("request %s: its workers died twice while holding it; answered with an error", request.id)
                replies_queue(pipe, [(request, Reply(None, DIED_TWICE, request.version, reclaimer))])
                shares_release(pipe, request.deployment, [request])
                if request.payload_key:
                    pipe.delete(request.payload_key)
            else:
                request.attempts += 1
                pipe.rpush(queue_key(request.deployment), request.encode(inline=not request.payload_key))
        pipe.delete(claimed)
        pipe.srem(HOLDERS_KEY, holder)
        pipe.execute()
        if handled:
            log.warning("took back %d requests held by the dead inference worker %s", handled, holder)
    return handled
