"""Bytes, not counts, bound what the inference path keeps in Redis and in a worker; a Redis that refuses
writes is answered at once; a dead worker's requests are taken back. Real Redis (the tests' own database
index, or a private redis-server for a small maxmemory), a stand-in scorer."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from types import SimpleNamespace

import numpy as np
import pytest
import redis as redis_lib

from common.redis_clients import redis_from_url
from inference.broker import (
    PAYLOAD_PREFIX,
    AsyncBrokerClient,
    InferenceRequest,
    QueueBounds,
    RedisRefused,
    WorkerError,
    dump_npy,
    queue_key,
    share_key,
)
from inference.rewards import RewardSettings
from inference.vlm.serving import StreamStep, TooManyStreams, _push_group, streams_admit
from inference.workers.loop import ALIVE_PREFIX, DIED_TWICE, HELD_PREFIX, InferenceWorker, requests_reclaim

from .test_redis_bounds import private_redis  # noqa: F401 - a redis-server of the test's own

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/5")


@pytest.fixture
def shared():
    client = redis_lib.Redis.from_url(URL)
    yield client
    for pattern in ("rs:inf:*", "rs:vlm:*"):
        for key in client.scan_iter(pattern):
            client.delete(key)
    client.close()


class PixelScorer:
    """Scores an image by its mean / 255; records the pixels of every forward batch."""

    def __init__(self):
        self.pixels: list[int] = []

    def score(self, batch: np.ndarray) -> list[float]:
        self.pixels.append(int(batch.size // 3))
        return [float(x.mean()) / 255.0 for x in batch]


def _worker(redis, name: str, scorer, **options) -> InferenceWorker:
    return InferenceWorker(
        redis,
        load_model=lambda _: (1, scorer),
        report_health=lambda *a: None,
        list_deployments=lambda: [name],
        **options,
    )


def _submit_all(url: str, calls: list[tuple[str, bytes, dict]], bounds: QueueBounds | None = None) -> list:
    """Submit at once through the web side's broker; each result is a Reply or the exception raised."""

    async def run():
        client = AsyncBrokerClient(redis_from_url(url, asyncio=True), bounds)
        try:
            return await asyncio.gather(
                *(client.submit(name, 1, payload, **options) for name, payload, options in calls),
                return_exceptions=True,
            )
        finally:
            await client.redis.aclose()

    return asyncio.run(run())


def test_the_queue_holds_headers_and_payloads_are_stored_apart(shared):
    name = f"d-{uuid.uuid4().hex[:8]}"
    payload = dump_npy(np.zeros((3, 64, 64, 3), np.uint8))
    (reply,) = _submit_all(URL, [(name, payload, {"timeout": 1, "client": "a1"})])
    assert "no inference worker answered" in str(reply)
    (message,) = shared.lrange(queue_key(name), 0, -1)
    request = InferenceRequest.decode(message)
    assert len(message) < 1024 and request.payload == b""  # a header: the script moved no payload bytes
    assert (request.items, request.pixels, request.nbytes) == (3, 3 * 64 * 64, len(payload))
    assert shared.get(request.payload_key) == payload and 0 < shared.ttl(request.payload_key) <= 61
    assert int(shared.hget(share_key(name), "a1*b")) == len(payload) == int(shared.hget(share_key(name), "*b"))


def test_byte_budgets_refuse_at_once_and_leave_nothing_behind(shared):
    name = f"d-{uuid.uuid4().hex[:8]}"
    payload = dump_npy(np.zeros((4, 256, 256, 3), np.uint8))  # 786 kB
    bounds = QueueBounds(max_client_bytes=2 * len(payload), max_queue_bytes=3 * len(payload))
    started = time.monotonic()
    first = _submit_all(URL, [(name, payload, {"timeout": 2, "client": "a1"}) for _ in range(3)], bounds)
    then = _submit_all(URL, [(name, payload, {"timeout": 2, "client": c}) for c in ("a2", "a3")], bounds)
    assert time.monotonic() - started < 7  # two rounds of 2 s timeouts; the refusals did not wait
    refused = [r for r in [*first, *then] if not isinstance(r, Exception)]  # refusals are Replies with an error...
    assert len(refused) == 2
    assert "INFERENCE_CLIENT_QUEUE_MAX_BYTES" in refused[0].error  # a1's third: its own budget
    assert "INFERENCE_QUEUE_MAX_BYTES" in refused[1].error  # a3: the deployment's
    with pytest.raises(WorkerError):
        refused[0].unwrap()  # ...which the web side answers with a 503
    assert shared.llen(queue_key(name)) == 3
    assert len(list(shared.scan_iter(PAYLOAD_PREFIX + "*"))) == 3  # refused payloads were dropped at once
    assert int(shared.hget(share_key(name), "*b")) == 3 * len(payload)


def test_a_redis_at_its_maxmemory_is_answered_at_once(private_redis):  # noqa: F811
    client = redis_lib.Redis.from_url(private_redis.url)
    client.config_set("maxmemory", 32 * 1024 * 1024)
    client.config_set("maxmemory-policy", "noeviction")
    chunk = b"x" * (1024 * 1024)
    with pytest.raises(redis_lib.exceptions.OutOfMemoryError):
        for i in range(64):
            client.set(f"filler:{i}", chunk)
    keys = client.dbsize()
    payload = dump_npy(np.zeros((40, 512, 512, 3), np.uint8))  # 31 MB
    started = time.monotonic()
    (result,) = _submit_all(private_redis.url, [("full", payload, {"timeout": 30, "client": "a1"})])
    assert time.monotonic() - started < 2  # not the 30 s timeout
    assert isinstance(result, RedisRefused) and "maxmemory" in str(result)
    assert client.dbsize() == keys  # nothing half-written


def test_a_worker_batch_stays_within_the_pixel_cap(shared):
    name = f"d-{uuid.uuid4().hex[:8]}"
    scorer = PixelScorer()
    cap = 5 * 128 * 128
    worker = _worker(shared, name, scorer, max_batch_pixels=cap)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    images = [np.full((12, 128, 128, 3), 10 * i, np.uint8) for i in range(4)]  # 4 requests of 12 images
    try:
        thread.start()
        replies = _submit_all(
            URL, [(name, dump_npy(a), {"timeout": 20, "client": f"a{i}"}) for i, a in enumerate(images)]
        )
    finally:
        stop.set()
        thread.join(10)
    for i, reply in enumerate(replies):
        assert reply.unwrap() == pytest.approx([10 * i / 255.0] * 12)
    assert max(scorer.pixels) <= cap and sum(scorer.pixels) == 4 * 12 * 128 * 128
    assert not list(shared.scan_iter(PAYLOAD_PREFIX + "*"))  # answered payloads are deleted with the replies


def test_a_dead_workers_requests_go_back_once_then_are_answered_with_the_reason(shared):
    name = f"d-{uuid.uuid4().hex[:8]}"
    payload = dump_npy(np.full((1, 8, 8, 3), 51, np.uint8))

    async def submit():
        client = AsyncBrokerClient(redis_from_url(URL, asyncio=True))
        try:
            return await client.submit(name, 1, payload, timeout=20, client="a1")
        finally:
            await client.redis.aclose()

    result: list = []
    waiter = threading.Thread(target=lambda: result.append(asyncio.run(submit())))
    waiter.start()
    while not shared.llen(queue_key(name)):
        time.sleep(0.01)

    class Dies(Exception):
        pass

    def dying_load(_):
        raise Dies  # stands for kill -9 in the middle of the batch: nothing after the pop runs

    dead = InferenceWorker(
        shared, load_model=dying_load, report_health=lambda *a: None, list_deployments=lambda: [name]
    )
    dead._refresh()
    dead._waiting = dead._reply_and_wait([], 1.0)  # took the request (held), then "died" before answering
    assert shared.llen(queue_key(name)) == 0 and shared.llen(HELD_PREFIX + dead.worker_id) == 1
    shared.delete(ALIVE_PREFIX + dead.worker_id)  # its alive key expired
    assert requests_reclaim(shared, "other") == 1  # back in its queue, once
    (message,) = shared.lrange(queue_key(name), 0, -1)
    assert InferenceRequest.decode(message).attempts == 1

    again = InferenceWorker(
        shared, load_model=dying_load, report_health=lambda *a: None, list_deployments=lambda: [name], worker_id="again"
    )
    again._refresh()
    again._waiting = again._reply_and_wait([], 1.0)
    shared.delete(ALIVE_PREFIX + "again")
    assert requests_reclaim(shared, "other") == 1
    waiter.join(5)
    assert result and result[0].error == DIED_TWICE  # answered at once, not after its 20 s timeout
    assert not shared.hget(share_key(name), "a1") and not list(shared.scan_iter(PAYLOAD_PREFIX + "*"))


def test_vlm_step_buffers_are_bounded_in_bytes_per_client(shared, settings):
    settings.VLM_MAX_STREAMS, settings.VLM_STREAM_TTL_S = 100, 30
    frame = np.zeros((512, 512, 3), np.uint8)  # 786 kB per view
    settings.VLM_CLIENT_BUFFER_MAX_BYTES = 6 * 2 * frame.nbytes + 10_000  # records carry a small header
    deployment = SimpleNamespace(
        config=SimpleNamespace(name="vlm-bytes", id=uuid.uuid4().int % 10_000, project_id=None)
    )

    def steps(*names, done=False):
        return [StreamStep(stream=n, main=frame, extra=frame, done=done) for n in names]

    async def push(redis, client, batch):
        await streams_admit(redis, deployment, client, batch)
        keys = [f"rs:vlm:hist:t:{client}:{step.stream}" for step in batch]
        await _push_group(
            redis, keys, batch, RewardSettings(history_size=2), 30, f"rs:vlm:bytes:t:{deployment.config.id}:{client}"
        )

    async def admits() -> None:
        redis = redis_from_url(URL, asyncio=True)
        deployment.config.name = "t"
        for _ in range(3):  # a stream keeps history_size + 1 = 3 steps: 2 streams x 3 steps x 2 views
            await push(redis, "a1", steps("0", "1"))
        held = await redis.hgetall(f"rs:vlm:bytes:t:{deployment.config.id}:a1")
        assert sorted(int(v) // (2 * frame.nbytes) for v in held.values()) == [3, 3]  # counted exactly
        with pytest.raises(TooManyStreams, match=r"VLM_CLIENT_BUFFER_MAX_BYTES"):
            await push(redis, "a1", steps("2"))  # 6 steps held, a 7th would pass the budget of 6
        await push(redis, "a2", steps("2"))  # another client has its own budget
        await push(redis, "a1", steps("0", done=True))  # a finished stream frees its bytes...
        await push(redis, "a1", steps("2"))  # ...so a new one fits
        await redis.aclose()

    asyncio.run(admits())
