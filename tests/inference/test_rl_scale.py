"""An RL run's batch of envs, all at once from one trusted address, gets every answer as a 200.

RLinf's API reward worker sends one request per env at once and ends the run on any non-200. Before: 256
concurrent chat requests from a trusted address got 63 answers `503 "Redis is unavailable: Too many
connections"` (redis-py's asyncio pool holds 100 connections, and each waiting request holds one for its
BLPOP); the per-address rate limit (every tokenless caller one client), the per-client queue share and a
30 s timeout while a model loads on demand ended such a run the same way.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import redis
import requests
from django.conf import settings
from django.test import override_settings

from common.redis_clients import PoolSize, redis_from_url
from inference.broker import (
    ALIVE_PREFIX,
    LOADING_PREFIX,
    READY_PREFIX,
    AsyncBrokerClient,
    BrokerError,
    InferenceTimeout,
    Reply,
    deadline_from_ready,
    dump_npy,
    queue_key,
)
from tests.conftest import _spawn, _stop, _wait_for_port, free_port

from .conftest import deploy, make_trained_model
from .test_rlinf_api_worker import rlinf_chat_payloads

CONCURRENT = 256


def test_concurrent_blocking_pops_wait_for_a_pooled_connection_instead_of_failing():
    async def run():
        client = redis_from_url(settings.REDIS_URL, asyncio=True, pool=PoolSize(max_connections=4, timeout_s=10))
        keys = [f"rs:test:none:{uuid.uuid4().hex}" for _ in range(16)]
        started = time.monotonic()
        got = await asyncio.gather(*(client.blpop([k], timeout=0.2) for k in keys))
        took = time.monotonic() - started
        await client.aclose()
        return got, took

    got, took = asyncio.run(run())
    assert got == [None] * 16  # every pop ran (none refused), four at a time
    assert took >= 0.2 * 16 / 4 * 0.9


def test_a_request_that_finds_every_connection_busy_too_long_gets_a_clear_error():
    async def run():
        pool = PoolSize(max_connections=1, timeout_s=0.2)
        client = AsyncBrokerClient(redis_from_url(settings.REDIS_URL, asyncio=True, pool=pool), pool=pool)
        holder = asyncio.create_task(client.redis.blpop([f"rs:test:none:{uuid.uuid4().hex}"], timeout=2))
        await asyncio.sleep(0.05)
        try:
            with pytest.raises(BrokerError) as refused:
                await client.submit(f"d-{uuid.uuid4().hex[:6]}", 1, dump_npy(np.zeros((1, 2, 2, 3), np.uint8)))
        finally:
            await holder
            await client.redis.aclose()
        return str(refused.value)

    message = asyncio.run(run())
    assert "all 1 Redis connections of this web process stayed in use for 0.2 s" in message
    assert "REDIS_MAX_CONNECTIONS" in message and "REDIS_POOL_TIMEOUT_S" in message


def test_the_wait_counts_from_when_the_model_is_ready():
    assert deadline_from_ready(100.0, 130.0, 0.0) == 130.0  # no load seen
    assert deadline_from_ready(100.0, 130.0, 90.0) == 130.0  # ready before the request was sent
    assert deadline_from_ready(100.0, 130.0, 145.0) == 175.0  # sent at 100, ready at 145: 30 s from then


def _answer_later(deployment: str, delay_s: float, *, loading: bool) -> None:
    """A worker, in plain Redis commands: says it loads `deployment` (its alive key set), then after
    `delay_s` marks it ready and answers the oldest request."""
    r = redis.Redis.from_url(settings.REDIS_URL)
    worker = f"test-{uuid.uuid4().hex[:6]}"
    if loading:
        r.set(ALIVE_PREFIX + worker, "1", ex=30)
        r.hset(LOADING_PREFIX + deployment, worker, time.time())
    time.sleep(delay_s)
    r.hdel(LOADING_PREFIX + deployment, worker)
    r.set(READY_PREFIX + deployment, time.time(), ex=60)
    message = r.rpop(queue_key(deployment))
    assert message is not None
    from inference.broker import InferenceRequest

    request = InferenceRequest.decode(message)
    r.rpush(request.reply_key, Reply([0.5], version=1, worker=worker).encode())
    r.delete(ALIVE_PREFIX + worker)


@pytest.mark.parametrize("loading", [True, False])
def test_a_model_loading_on_demand_does_not_time_out_the_requests_waiting_for_it(loading):
    deployment = f"load-{uuid.uuid4().hex[:8]}"

    async def run():
        client = AsyncBrokerClient(redis_from_url(settings.REDIS_URL, asyncio=True), load_wait_s=30)
        try:
            return await client.submit(deployment, 1, dump_npy(np.zeros((1, 2, 2, 3), np.uint8)), timeout=1.0)
        finally:
            await client.redis.aclose()

    with ThreadPoolExecutor(1) as pool:
        answering = pool.submit(_answer_later, deployment, 2.5, loading=loading)
        if loading:  # the load takes 2.5 s, the request's timeout is 1 s: it is answered
            assert asyncio.run(run()).unwrap() == [0.5]
        else:  # no worker said it was loading: the request times out after its 1 s, as before
            with pytest.raises(InferenceTimeout):
                asyncio.run(run())
        answering.result()


@pytest.fixture(scope="module")
def trusted_server_url(process_env):
    """An ASGI server trusting loopback, with the shipped limits (tests otherwise may lower them)."""
    port = free_port()
    env = {**process_env, "TRUSTED_CIDRS": "127.0.0.1/32"}
    args = ["-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    proc = _spawn([__import__("sys").executable, *args, "--log-level", "warning"], env, f"uvicorn-rl-{port}.log")
    try:
        _wait_for_port(port, proc)
        requests.get(f"http://127.0.0.1:{port}/healthz", timeout=120)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


def _burst(post, bodies) -> tuple[Counter, list[str]]:
    def one(body):
        try:
            response = post(body)
            return response.status_code, response.text[:200]
        except requests.RequestException as exc:
            return 0, str(exc)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        results = list(pool.map(one, bodies))
    return Counter(s for s, _ in results), [t for s, t in results if s != 200][:3]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_rl_batch_of_256_envs_from_one_trusted_address_gets_every_answer(
    project, trusted_server_url, inference_worker_process, clear_rate_limits, tmp_path
):
    from django.core.files.storage import default_storage

    from training.models import TrainedModel
    from training.vlm.fixture import build_tiny_qwen3_vl

    folder = f"checkpoints/vlm_{uuid.uuid4().hex[:8]}"
    build_tiny_qwen3_vl(default_storage.path(folder))
    vlm = TrainedModel.objects.create(project=project, kind="vlm", name="tiny-qwen3-vl", checkpoint_path=folder)
    deploy(vlm, aliases=["qwen3-vl-4b-instruct"], max_batch_size=32, max_wait_ms=20.0)
    resnet = deploy(make_trained_model(project), max_batch_size=64, max_wait_ms=5.0)

    def chat(body):
        return requests.post(f"{trusted_server_url}/v1/chat/completions", json=body, timeout=300, proxies={})

    def reward(body):
        url = f"{trusted_server_url}/api/deployments/{resnet.name}/rewards"
        return requests.post(url, data=body, headers={"Content-Type": "application/x-npy"}, timeout=300, proxies={})

    images = np.random.default_rng(0).integers(0, 256, (CONCURRENT, 1, 32, 32, 3), dtype=np.uint8)
    # cold: the models load on demand while the whole batch waits
    statuses, errors = _burst(reward, [dump_npy(a) for a in images])
    assert statuses == {200: CONCURRENT}, errors
    # RLinf 0.3.0's qwentrend input builder makes the windows' bodies (tests/inference/test_rlinf_api_worker.py)
    statuses, errors = _burst(chat, rlinf_chat_payloads(tmp_path, CONCURRENT, "Qwen3-VL-4B-Instruct"))
    assert statuses == {200: CONCURRENT}, errors


@pytest.mark.django_db
def test_trusted_callers_are_counted_per_address_against_their_own_limit(client, clear_rate_limits):
    images = dump_npy(np.zeros((1, 4, 4, 3), np.uint8))
    url = "/api/deployments/nope/rewards"  # 404 after the throttles: each request is counted

    def statuses(address: str, n: int) -> list[int]:
        return [
            client.post(url, data=images, content_type="application/x-npy", REMOTE_ADDR=address).status_code
            for _ in range(n)
        ]

    limits = {"API_RATE_LIMIT": "2/minute", "REWARDS_RATE_LIMIT": "2/minute", "BAD_REQUEST_RATE_LIMIT": ""}
    with override_settings(TRUSTED_CIDRS=["10.0.0.0/8"], TRUSTED_RATE_LIMIT="5/minute", **limits):
        assert statuses("10.0.0.1", 5) == [404] * 5  # past API_RATE_LIMIT: trusted callers have their own
        refused = client.post(url, data=images, content_type="application/x-npy", REMOTE_ADDR="10.0.0.1")
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0  # the 6th of 5/minute
        assert statuses("10.0.0.2", 5) == [404] * 5  # another address is another client
