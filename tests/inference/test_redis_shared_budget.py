"""No tenant can fill the shared Redis: VLM step buffers share one global byte budget with per-project shares
(`inference.vlm.budget`), checked atomically, and a Redis at its maxmemory is a 503 with Retry-After, never
an uncaught error. A private redis-server per test (other suites share the usual one)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest
import redis as redis_lib

from common.redis_clients import redis_from_url
from inference.broker import (
    REPLY_CHECK_S,
    REPLY_GRACE_S,
    REPLY_LOST,
    AsyncBrokerClient,
    InferenceRequest,
    RedisRefused,
    dump_npy,
    queue_key,
)
from inference.rewards import RewardSettings
from inference.serving import DeploymentBusy
from inference.vlm.budget import BUDGET_KEY
from inference.vlm.serving import StreamStep, TooManyStreams, _budget_entry, _bytes_key, _text, steps_buffer

from .test_redis_bounds import private_redis  # noqa: F401 - a redis-server of the test's own

FRAME = np.zeros((256, 256, 3), np.uint8)  # 196 kB per view, 393 kB per step
STEP = 2 * FRAME.nbytes


def _deployment(project_id: int, name: str):
    return SimpleNamespace(config=SimpleNamespace(name=name, id=uuid.uuid4().int % 10_000, project_id=project_id))


def _steps(*names: str, done: bool = False) -> list[StreamStep]:
    return [StreamStep(stream=n, main=FRAME, extra=FRAME, done=done) for n in names]


async def _push(redis, deployment, client: str, steps: list[StreamStep]) -> None:
    await steps_buffer(redis, deployment, client, steps, RewardSettings(history_size=2))


def test_one_projects_clients_cannot_take_another_projects_room(private_redis, settings):  # noqa: F811
    settings.VLM_MAX_STREAMS, settings.VLM_STREAM_TTL_S = 1000, 60
    settings.VLM_CLIENT_BUFFER_MAX_BYTES = 1024 * 1024 * 1024
    settings.VLM_PROJECT_BUFFERS_MAX_BYTES = 10 * STEP + 50_000  # records carry a small header
    settings.VLM_BUFFERS_MAX_BYTES = 25 * STEP + 100_000
    a1, a2 = _deployment(1, "a-first"), _deployment(1, "a-second")
    b, c = _deployment(2, "b"), _deployment(3, "c")

    async def run():
        redis = redis_from_url(private_redis.url, asyncio=True)
        # project 1 through two deployments and two clients: together at most its share
        for i in range(5):
            await _push(redis, a1, "t1", _steps(f"s{i}"))
            await _push(redis, a2, "t2", _steps(f"s{i}"))
        with pytest.raises(TooManyStreams, match="VLM_PROJECT_BUFFERS_MAX_BYTES"):
            await _push(redis, a2, "t3", _steps("new"))
        for i in range(10):  # project 2 takes its own share
            await _push(redis, b, "t4", _steps(f"s{i}"))
        with pytest.raises(TooManyStreams, match="VLM_PROJECT_BUFFERS_MAX_BYTES"):
            await _push(redis, b, "t4", _steps("more"))
        await _push(redis, c, "t5", _steps("x", "y"))  # project 3 still has room
        for i in range(3):  # ...until every buffer together reaches the global budget: busy, a 503
            await _push(redis, c, "t5", _steps(f"z{i}"))
        with pytest.raises(DeploymentBusy, match="VLM_BUFFERS_MAX_BYTES"):
            await _push(redis, c, "t6", _steps("w"))
        await _push(redis, a1, "t1", _steps("s0", done=True))  # a finished stream gives its bytes back
        await _push(redis, c, "t6", _steps("w"))
        await redis.aclose()

    asyncio.run(run())


def test_concurrent_requests_never_pass_the_budget_together(private_redis, settings):  # noqa: F811
    settings.VLM_MAX_STREAMS, settings.VLM_STREAM_TTL_S = 1000, 60
    settings.VLM_CLIENT_BUFFER_MAX_BYTES = 1024 * 1024 * 1024
    settings.VLM_PROJECT_BUFFERS_MAX_BYTES = settings.VLM_BUFFERS_MAX_BYTES = 8 * STEP + 50_000
    deployment = _deployment(7, "race")

    async def run():
        redis = redis_from_url(private_redis.url, asyncio=True)
        # 40 requests of one client at once: each saw the same (empty) buffers when it started
        got = await asyncio.gather(
            *(_push(redis, deployment, "t", _steps(f"s{i}")) for i in range(40)), return_exceptions=True
        )
        stored = sum(1 for g in got if g is None)
        refused = [g for g in got if g is not None]
        held = sum(int(v) for v in (await redis.hgetall(_bytes_key(deployment, "t"))).values())
        budget = {k.decode(): int(v) for k, v in (await redis.hgetall(BUDGET_KEY)).items()}
        await redis.aclose()
        return stored, refused, held, budget

    stored, refused, held, budget = asyncio.run(run())
    assert stored == 8 and all(isinstance(r, DeploymentBusy | TooManyStreams) for r in refused), refused
    assert held <= settings.VLM_BUFFERS_MAX_BYTES
    # every reservation was given back: the entry holds what the buffers hold, exactly
    assert budget == {f"h|{_budget_entry(deployment, 't')}": held}, budget


def test_a_step_arriving_while_redis_is_full_is_busy_not_an_error(tmp_path, settings):
    """Redis at its maxmemory (noeviction): the step is a DeploymentBusy (503 with Retry-After), and its
    reservation is given back even then."""
    from .test_redis_bounds import PrivateRedis

    settings.VLM_MAX_STREAMS, settings.VLM_STREAM_TTL_S = 1000, 60
    server = PrivateRedis(tmp_path)
    server.start()
    sync = redis_lib.Redis.from_url(server.url)
    try:
        sync.config_set("maxmemory", 8 * 1024 * 1024)
        sync.config_set("maxmemory-policy", "noeviction")
        deployment = _deployment(1, "full")

        async def run():
            redis = redis_from_url(server.url, asyncio=True)
            await _push(redis, deployment, "t", _steps("a"))  # a stream with room
            i = 0
            while True:  # someone else fills Redis
                try:
                    await redis.set(f"filler:{i}", b"x" * 256 * 1024)
                except redis_lib.exceptions.OutOfMemoryError:
                    break
                i += 1
            for names in (["a"], ["b"]):  # a known stream, a new one
                with pytest.raises(DeploymentBusy, match="maxmemory"):
                    await _push(redis, deployment, "t", _steps(*names))
            budget = {k.decode(): int(v) for k, v in (await redis.hgetall(BUDGET_KEY)).items()}
            await redis.aclose()
            return budget

        budget = asyncio.run(run())
        assert not [k for k in budget if k.startswith("r|")], budget  # no reservation left behind
    finally:
        sync.close()
        server.stop()


def _full_redis(tmp_path, maxmemory: int):
    from .test_redis_bounds import PrivateRedis

    server = PrivateRedis(tmp_path)
    server.start()
    sync = redis_lib.Redis.from_url(server.url)
    sync.config_set("maxmemory", maxmemory)
    sync.config_set("maxmemory-policy", "noeviction")
    return server, sync


def _fill(sync) -> None:
    i = 0
    while True:
        try:
            sync.set(f"filler:{i}", b"x" * 64 * 1024)
        except redis_lib.exceptions.OutOfMemoryError:
            return
        i += 1


def _submit_in_thread(url: str, payload: bytes, timeout: float) -> tuple[threading.Thread, list]:
    """One request through the web side's broker, in a thread; its Reply or exception and seconds taken."""
    out: list = []

    def run():
        async def go():
            client = AsyncBrokerClient(redis_from_url(url, asyncio=True))
            try:
                return await client.submit("d", 1, payload, timeout=timeout)
            finally:
                await client.redis.aclose()

        started = time.monotonic()
        try:
            out.append(asyncio.run(go()))
        except Exception as exc:  # the test looks at it
            out.append(exc)
        out.append(time.monotonic() - started)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _queued(sync) -> None:
    deadline = time.monotonic() + 10
    while not sync.llen(queue_key("d")):
        assert time.monotonic() < deadline, "the request was never queued"
        time.sleep(0.02)


def test_a_scored_request_on_a_full_redis_still_gets_its_reply(tmp_path):
    """The worker frees the batch's payloads before storing its replies, in the same round trip: Redis at its
    maxmemory (filled while the request waited) still takes the reply."""
    from inference.workers.loop import InferenceWorker

    server, sync = _full_redis(tmp_path, 16 * 1024 * 1024)
    try:
        scorer = SimpleNamespace(score=lambda batch: [float(x.mean()) / 255.0 for x in batch])
        worker = InferenceWorker(
            redis_lib.Redis.from_url(server.url),
            load_model=lambda _: (1, scorer),
            report_health=lambda *a: None,
            list_deployments=lambda: ["d"],
        )
        worker._model_for("d", 1)  # loaded before Redis fills
        payload = dump_npy(np.full((4, 512, 512, 3), 255, np.uint8))  # 3 MB
        thread, out = _submit_in_thread(server.url, payload, timeout=30)
        _queued(sync)
        _fill(sync)
        assert worker.poll_once(timeout_s=1.0) == 1
        thread.join(30)
        reply, seconds = out
        assert not isinstance(reply, Exception), reply
        assert reply.unwrap() == [1.0] * 4 and seconds < 10
    finally:
        sync.close()
        server.stop()


def test_a_reply_redis_refused_fails_its_request_at_once_with_the_reason(tmp_path):
    """A worker took the request (its payload is gone) but its reply never reached Redis: the caller is told so
    within seconds (a busy 503 upstream), not after its whole timeout."""
    server, sync = _full_redis(tmp_path, 64 * 1024 * 1024)
    try:
        thread, out = _submit_in_thread(server.url, dump_npy(np.zeros((1, 8, 8, 3), np.uint8)), timeout=60)
        _queued(sync)
        header = InferenceRequest.decode(sync.rpop(queue_key("d")))  # a worker takes it...
        sync.delete(header.payload_key)  # ...serves it, and Redis refuses the reply
        thread.join(30)
        error, seconds = out
        assert isinstance(error, RedisRefused) and error.args[0] == REPLY_LOST, error
        assert seconds < REPLY_CHECK_S + REPLY_GRACE_S + 2, seconds
    finally:
        sync.close()
        server.stop()


def test_in_flight_payloads_share_a_global_budget_with_project_shares(private_redis):  # noqa: F811
    """Payloads waiting in every queue count against INFERENCE_INFLIGHT_MAX_BYTES, one project's against
    INFERENCE_PROJECT_INFLIGHT_MAX_BYTES (busy refusals, at once); a worker's pop gives them back."""
    from inference.broker import QueueBounds, shares_release

    payload = dump_npy(np.zeros((1, 300, 300, 3), np.uint8))  # 270 kB: the one-round-trip path
    bounds = QueueBounds(max_inflight_bytes=5 * len(payload), max_project_inflight_bytes=3 * len(payload))

    async def run():
        client = AsyncBrokerClient(redis_from_url(private_redis.url, asyncio=True), bounds)

        async def send(deployment: str, project: int):
            try:
                return await client.submit(deployment, 1, payload, timeout=0.2, project=project)
            except Exception as exc:  # a timeout: it was queued (nobody serves it here)
                return exc

        got = [await send(f"d{i % 2}", 1) for i in range(4)]  # project 1 on two deployments
        got += [await send("d2", 2) for _ in range(3)]
        await client.redis.aclose()
        return got

    got = asyncio.run(run())
    messages = [g.error if not isinstance(g, Exception) else "queued" for g in got]
    assert messages[:3] == ["queued"] * 3 and "INFERENCE_PROJECT_INFLIGHT_MAX_BYTES" in messages[3], messages
    assert messages[4:6] == ["queued"] * 2 and "INFERENCE_INFLIGHT_MAX_BYTES" in messages[6], messages
    assert all(g.busy for g in got if not isinstance(g, Exception))  # a 503 with Retry-After upstream
    sync = redis_lib.Redis.from_url(private_redis.url)
    held = {_text(k): int(v) for k, v in sync.hgetall("rs:inf:inflight").items()}
    assert held == {"*b": 5 * len(payload), "p1": 3 * len(payload), "p2": 2 * len(payload)}, held
    for name in ("d0", "d1", "d2"):  # a worker pops and serves them: their bytes are given back
        popped = [InferenceRequest.decode(cast(bytes, m)) for m in sync.lrange(queue_key(name), 0, -1)]
        shares_release(sync, name, popped)
    assert not sync.hgetall("rs:inf:inflight")
    sync.close()


def test_concurrent_large_payloads_are_refused_before_they_reach_redis(tmp_path):
    """Large bodies reserve their bytes before they are written: 8 concurrent 12 MB payloads at a Redis capped at
    64 MiB with a 30 MB in-flight budget: 2 are queued, 6 refused by the budget (busy), and Redis stays under its
    cap (each SET used to land before any check refused it: 1.41-1.57 GiB at a 1 GiB cap)."""
    from inference.broker import QueueBounds

    server, sync = _full_redis(tmp_path, 64 * 1024 * 1024)
    payload = dump_npy(np.zeros((4, 1024, 1024, 3), np.uint8))  # 12.6 MB
    bounds = QueueBounds(max_inflight_bytes=30 * 1024 * 1024, max_project_inflight_bytes=30 * 1024 * 1024)
    stop, peak = threading.Event(), [0]

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], int(sync.info("memory")["used_memory"]))
            time.sleep(0.005)

    async def run():
        client = AsyncBrokerClient(
            redis_from_url(server.url, asyncio=True), bounds, payload_redis=redis_lib.Redis.from_url(server.url)
        )

        async def send():
            try:
                return await client.submit("big", 1, payload, timeout=1.0, project=1)
            except Exception as exc:  # a timeout: it was queued (nobody serves it here)
                return exc

        got = await asyncio.gather(*(send() for _ in range(8)))
        await client.redis.aclose()
        return got

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        got = asyncio.run(run())
    finally:
        stop.set()
        sampler.join()
        sync.close()
        server.stop()
    refused = [g for g in got if not isinstance(g, Exception)]
    assert len(refused) == 6 and all(g.busy and "INFERENCE_INFLIGHT_MAX_BYTES" in g.error for g in refused), got
    assert peak[0] < 64 * 1024 * 1024, peak
    print(f"Redis peak {peak[0] / 1024 / 1024:.1f} MiB under a 64 MiB cap")
