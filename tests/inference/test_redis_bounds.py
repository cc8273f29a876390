"""Redis bounded and reconnecting: capped, expiring inference queues; fair pops across deployments; rate
limits (sync and async) on the `limits` library; memory-policy warnings; every Redis client (inference
broker, Channels layer, Celery publisher) survives a Redis restart. Restarts use a private redis-server
on a free port, never the shared one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest
import redis as redis_lib

from common.redis_clients import redis_from_url
from inference.broker import (
    AsyncBrokerClient,
    InferenceRequest,
    QueueBounds,
    WorkerError,
    check_memory_policy,
    dump_npy,
    memory_policy_warnings,
    queue_key,
)
from inference.vlm.serving import StreamStep, TooManyStreams, streams_admit
from inference.workers.loop import InferenceWorker
from projects.gate.limits import RateLimiter, rate_item

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/5")


class ConstScorer:
    def __init__(self):
        self.batches: list[int] = []

    def score(self, batch: np.ndarray) -> list[float]:
        self.batches.append(len(batch))
        return [float(x.mean()) / 255.0 for x in batch]


@pytest.fixture
def shared():
    client = redis_lib.Redis.from_url(URL)
    yield client
    for pattern in ("rs:inf:*", "rs:rl*", "rs:vlm:*"):
        for key in client.scan_iter(pattern):
            client.delete(key)
    client.close()


class PrivateRedis:
    """A redis-server of our own on a free port, which the test may stop and start again."""

    def __init__(self, tmp_path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = tmp_path
        self.proc: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen([*args, "--dir", str(self.dir)], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("private redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def capped_redis_server(tmp_path, maxmemory: int) -> Iterator[tuple[str, redis_lib.Redis]]:
    """A private redis-server capped at `maxmemory` bytes (noeviction): its URL and a client of it."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is required (scripts/lib.sh installs it)")
    server = PrivateRedis(tmp_path)
    server.start()
    client = redis_lib.Redis.from_url(server.url)
    client.config_set("maxmemory", maxmemory)
    client.config_set("maxmemory-policy", "noeviction")
    try:
        yield server.url, client
    finally:
        client.close()
        server.stop()


@pytest.fixture
def private_redis(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is required (scripts/lib.sh installs it)")
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def _request_bytes(name: str, deadline_s: float = 60.0) -> bytes:
    array = np.zeros((1, 4, 4, 3), np.uint8)
    return InferenceRequest(name, 1, dump_npy(array), time.time() + deadline_s).encode()


def _worker(redis, names: list[str], scorer: ConstScorer) -> InferenceWorker:
    return InferenceWorker(
        redis, load_model=lambda name: (1, scorer), report_health=lambda *a: None, list_deployments=lambda: names
    )


def submit(deployment: str, version: int, payload: bytes, *, bounds: QueueBounds, **options):
    """One request through the web side's (async) broker client, from sync test code."""

    async def run():
        client = AsyncBrokerClient(redis_from_url(URL, asyncio=True), bounds)
        try:
            return await client.submit(deployment, version, payload, **options)
        finally:
            await client.redis.aclose()

    return asyncio.run(run())


def test_a_full_queue_is_refused_at_once_and_queues_expire(shared):
    name = f"d-{uuid.uuid4().hex[:8]}"
    bounds = {"bounds": QueueBounds(max_queue=3, queue_ttl_s=7)}
    for _ in range(3):
        shared.lpush(queue_key(name), _request_bytes(name))
    started = time.monotonic()
    with pytest.raises(
        WorkerError, match=r"queue of deployment .* is full \(3 requests waiting, INFERENCE_QUEUE_MAX\)"
    ):
        submit(name, 1, dump_npy(np.zeros((1, 4, 4, 3), np.uint8)), timeout=10, **bounds).unwrap()
    assert time.monotonic() - started < 2  # answered at once, not after the timeout
    assert shared.llen(queue_key(name)) == 3

    other = f"d-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception, match="no inference worker answered"):
        submit(other, 1, dump_npy(np.zeros((1, 4, 4, 3), np.uint8)), timeout=1, **bounds)
    assert 0 < shared.ttl(queue_key(other)) <= 7  # a queue nobody serves goes away


def test_one_client_cannot_fill_a_deployment_queue(shared):
    name = f"d-{uuid.uuid4().hex[:8]}"
    bounds = QueueBounds(max_queue=10, queue_ttl_s=30, max_per_client=3)
    images = dump_npy(np.zeros((1, 4, 4, 3), np.uint8))

    def send(who: str) -> str:
        try:
            submit(name, 1, images, timeout=0.1, client=who, bounds=bounds).unwrap()
        except Exception as exc:  # no worker runs: a timeout means the request was queued
            return "refused" if "INFERENCE_CLIENT_QUEUE_MAX" in str(exc) else "queued"
        return "answered"

    assert [send("a1") for _ in range(4)] == ["queued", "queued", "queued", "refused"]
    assert send("a2") == "queued"  # another client still gets in
    worker = _worker(redis_from_url(URL), [name], ConstScorer())
    worker.poll_once(timeout_s=1)  # pops (and skips, their callers gave up) the waiting requests
    assert shared.llen(queue_key(name)) == 0 and shared.hgetall(f"rs:inf:share:{name}") == {}
    assert send("a1") == "queued"  # the worker's pops gave the client its places back


def test_a_flooded_deployment_does_not_starve_another(shared):
    flooded, quiet = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    shared.lpush(queue_key(flooded), *[_request_bytes(flooded) for _ in range(400)])
    lone = InferenceRequest(quiet, 1, dump_npy(np.zeros((1, 4, 4, 3), np.uint8)), time.time() + 60)
    shared.lpush(queue_key(quiet), lone.encode())
    worker = _worker(redis_from_url(URL), [flooded, quiet], ConstScorer())
    worker.wake_count = 16
    polls = 0
    while shared.llen(lone.reply_key) == 0:
        worker.poll_once(timeout_s=1)
        polls += 1
        assert polls <= 2, "the quiet deployment's request waited behind the flood"
    assert shared.llen(queue_key(flooded)) > 300  # served in turn, not after the whole flood


def test_rate_limits_count_in_redis_and_say_when_to_come_back(shared):
    item = rate_item("3/minute")
    key = f"test:{uuid.uuid4().hex}"

    async def count() -> list:
        limiter = RateLimiter(URL)
        verdicts = [await limiter.hit(item, key) for _ in range(4)]
        other, unlimited = await limiter.hit(item, key + "-other"), await limiter.hit(None, key)
        return [*verdicts, other, unlimited]

    *verdicts, other, unlimited = asyncio.run(count())
    assert [v.allowed for v in verdicts] == [True, True, True, False]
    assert 1 <= verdicts[-1].retry_after <= 60 and verdicts[-1].limit == "3 per 1 minute"
    assert other.allowed  # per key
    assert unlimited.allowed  # an empty setting is no limit

    async def other_loop():  # a second event loop (another web process) has its own limiter
        limiter = RateLimiter(URL)
        return await limiter.check(item, key), await limiter.hit(item, key + "-async")

    shared_verdict, fresh = asyncio.run(other_loop())
    assert not shared_verdict.allowed and fresh.allowed  # the counters live in Redis, shared


def test_one_round_trip_checks_one_limit_then_counts_another_as_the_library_would(shared):
    checked, counted = rate_item("2/minute"), rate_item("3/minute")
    bad, rewards = f"bad:{uuid.uuid4().hex}", f"rewards:{uuid.uuid4().hex}"

    async def run() -> tuple[list, list, object, object]:
        limiter = RateLimiter(URL)
        admitted = [await limiter.check_then_hit(checked, bad, counted, rewards) for _ in range(4)]
        after_hits = await limiter.check(counted, rewards)  # the library sees the combined call's hits
        for _ in range(2):
            await limiter.hit(checked, bad)  # two bad requests: the checked limit is reached
        refused = [await limiter.check_then_hit(checked, bad, counted, rewards + "-other") for _ in range(2)]
        untouched = await limiter.check(counted, rewards + "-other")
        return admitted, refused, after_hits, untouched

    admitted, refused, after_hits, untouched = asyncio.run(run())
    assert [(a.allowed, b.allowed) for a, b in admitted] == [(True, True)] * 3 + [(True, False)]
    assert admitted[-1][1].limit == "3 per 1 minute" and 1 <= admitted[-1][1].retry_after <= 60
    assert not after_hits.allowed
    assert [a.allowed for a, _ in refused] == [False, False] and refused[0][0].limit == "2 per 1 minute"
    assert untouched.allowed  # a refused check counted nothing against the other limit


def test_memory_policy_warnings(private_redis):
    assert memory_policy_warnings({"maxmemory": "1073741824", "maxmemory-policy": "noeviction"}) == []
    for policy in ("allkeys-lru", "volatile-ttl"):
        warnings = memory_policy_warnings({b"maxmemory": b"1000000", b"maxmemory-policy": policy.encode()})
        assert len(warnings) == 1 and policy in warnings[0] and "noeviction" in warnings[0]
    client = redis_lib.Redis.from_url(private_redis.url)
    client.config_set("maxmemory-policy", "allkeys-lru")
    found = check_memory_policy(client, logging.getLogger("test"))
    assert any("allkeys-lru" in w for w in found) and any("no maxmemory cap" in w for w in found)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "64mb")
    assert check_memory_policy(client, logging.getLogger("test")) == []


@pytest.mark.slow
def test_inference_broker_channel_layer_and_celery_survive_a_redis_restart(private_redis, settings):
    from celery import Celery
    from channels_redis.core import RedisChannelLayer

    url = private_redis.url
    scorer = ConstScorer()
    name = "restart-test"
    worker = _worker(redis_from_url(url), [name], scorer)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    blocking = redis_from_url(url)  # sync reads (heartbeats, monitor counters) reconnect too
    images = dump_npy(np.full((1, 4, 4, 3), 255, np.uint8))
    layer_config = dict(settings.CHANNEL_LAYERS["default"]["CONFIG"])
    layer_config["hosts"] = [dict(layer_config["hosts"][0], address=url)]
    celery = Celery("restart-test", broker=url, set_as_current=False)
    celery.conf.update(
        broker_transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        task_publish_retry=settings.CELERY_TASK_PUBLISH_RETRY,
        task_publish_retry_policy=settings.CELERY_TASK_PUBLISH_RETRY_POLICY,
    )

    async def layer_round_trip(layer) -> dict:
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "ping"})
        return await asyncio.wait_for(layer.receive(channel), 5)

    async def async_submit() -> list:
        return (await _async_client(url).submit(name, 1, images, timeout=10)).unwrap()

    async def before_and_after() -> list:
        layer = RedisChannelLayer(**layer_config)
        got = [await layer_round_trip(layer), await async_submit()]
        celery.send_task("restart.test")
        private_redis.restart()
        await asyncio.sleep(0.2)
        got += [blocking.ping()]
        got += [await layer_round_trip(layer), await async_submit()]
        celery.send_task("restart.test")  # the publisher's pooled connection was dropped too
        await layer.flush()
        return got

    try:
        got = asyncio.run(before_and_after())
    finally:
        stop.set()
        thread.join(5)
    assert got == [{"type": "ping"}, [1.0], True, {"type": "ping"}, [1.0]]
    assert redis_lib.Redis.from_url(url).llen("celery") == 1  # the one sent after the restart


_async_clients: dict = {}


def _async_client(url: str):
    loop = asyncio.get_running_loop()
    if loop not in _async_clients:
        _async_clients[loop] = AsyncBrokerClient(redis_from_url(url, asyncio=True))
    return _async_clients[loop]


def test_vlm_stream_buffers_are_capped_per_client_and_expire(shared, settings):
    settings.VLM_MAX_STREAMS, settings.VLM_STREAM_TTL_S = 2, 30
    deployment = SimpleNamespace(config=SimpleNamespace(name="vlm-cap", id=uuid.uuid4().int % 10_000, project_id=None))

    def steps(*names, done=False):
        return [StreamStep(stream=n, main=None, extra=None, done=done) for n in names]

    async def admits() -> None:
        redis = redis_from_url(URL, asyncio=True)
        await streams_admit(redis, deployment, "a1", steps("0", "1"))
        with pytest.raises(TooManyStreams, match=r"already has 2 live streams .* at most 2 \(VLM_MAX_STREAMS\)"):
            await streams_admit(redis, deployment, "a1", steps("invented-name"))
        await streams_admit(redis, deployment, "a1", steps("1"))  # a known stream goes on
        await streams_admit(redis, deployment, "a2", steps("invented-name"))  # each client has its own places
        await streams_admit(redis, deployment, "a1", steps("0", done=True))  # a finished stream frees its place
        await streams_admit(redis, deployment, "a1", steps("2"))
        await redis.aclose()

    asyncio.run(admits())
    keys = list(shared.scan_iter("rs:vlm:streams:vlm-cap:*"))
    assert len(keys) == 2 and all(0 < shared.ttl(k) <= 30 for k in keys)


@pytest.mark.django_db(transaction=True)
def test_the_fast_path_limits_rewards_per_token_with_retry_after(shared, settings):
    from inference.fastpath import RewardsFastPath
    from projects.services import agent_create

    settings.REWARDS_RATE_LIMIT = "2/minute"
    _, token = agent_create(name="rl-rate", kind="rl_worker")
    _, other = agent_create(name="rl-rate-2", kind="rl_worker")
    app = RewardsFastPath(None)

    async def post(bearer: str):
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/api/deployments/no-such/rewards",
            "query_string": b"",
            "client": ("127.0.0.1", 1),
            "headers": [(b"content-type", b"application/x-npy"), (b"authorization", f"Bearer {bearer}".encode())],
        }
        await app(scope, receive, send)
        return sent[0]["status"], dict(sent[0]["headers"]), json.loads(sent[1]["body"])["detail"]

    async def scenario():
        return [await post(token) for _ in range(3)] + [await post(other)]

    answers = asyncio.run(scenario())
    assert [a[0] for a in answers] == [404, 404, 429, 404]  # the other token is not held back
    status, headers, detail = answers[2]
    assert 1 <= int(headers[b"retry-after"]) <= 60
    assert detail.startswith("reward rate limit reached for this token (2 per 1 minute)")
