"""Done-when of "nothing lost to a fault", inference worker: two real `manage.py inference_worker` processes
serve one deployment; the one holding a batch (its held list in Redis, `rs:inf:held:<host>:<pid>`) is killed
with `kill -9` in the middle of the forward pass. Every request is answered soon after: the surviving worker
takes the dead one's requests back (its alive key expires after ALIVE_TTL_S) and scores them, or answers a
request whose workers died twice with the reason. None waits for its full timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from inference.broker import dump_npy, queue_key
from inference.workers.loop import ALIVE_TTL_S, DIED_TWICE, HELD_PREFIX
from tests.conftest import _spawn, _stop, free_port
from tests.waiting import wait_until

from .conftest import broker_submit, deploy, make_tiny_checkpoint, make_trained_model, random_images

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REQUESTS = 8
IMAGES = 100  # per request: ~0.2 s of forward (one torch thread), time enough to kill the worker in the middle
SIZE = 32
TIMEOUT_S = 30.0  # each request's own timeout: a lost one would hang its client this long
ANSWERED_WITHIN_S = 10.0


def _private_redis_url(url: str) -> str:
    """The session's Redis server, another database: the session's own inference worker (serving every
    deployment, started by earlier tests) never takes, holds or answers this test's requests."""
    base, _, db = url.rpartition("/")
    return f"{base}/{(int(db or 0) + 8) % 16}"


def _worker(process_env, name: str, redis_url: str) -> subprocess.Popen:
    args = [sys.executable, "manage.py", "inference_worker", "--threads", "1", "--metrics-port", str(free_port())]
    return _spawn(args, {**process_env, "REDIS_URL": redis_url}, f"inference-worker-{name}.log")


def _holders(client) -> dict[str, int]:
    """Live workers' held lists with something in them: worker id -> requests held."""
    held = {}
    for key in client.scan_iter(match=HELD_PREFIX + "*", count=1000):
        worker = key.decode()[len(HELD_PREFIX) :]
        if not worker.startswith("reclaim:") and (count := client.llen(key)):
            held[worker] = count
    return held


def test_requests_a_killed_worker_held_are_answered_by_the_other_at_once(project, process_env, settings):
    import redis

    redis_url = _private_redis_url(settings.REDIS_URL)
    client = redis.Redis.from_url(redis_url)
    client.flushdb()  # no held lists or workers left by earlier runs
    checkpoint = make_tiny_checkpoint(size=SIZE)
    deployment = deploy(make_trained_model(project, checkpoint_path=checkpoint), max_batch_size=64)
    workers = {}
    try:
        for name in ("a", "b"):
            proc = _worker(process_env, name, redis_url)
            workers[proc.pid] = proc
        wait_until(
            lambda: all(client.exists(f"rs:inf:alive:{w}") for w in _worker_ids(client, workers)), 120, "workers"
        )
        # both load the model before the test proper (a load is not what this test is about)
        warm = broker_submit(redis_url, *[(deployment.name, 1, dump_npy(random_images(2, SIZE)), {})] * 4)
        assert all(r.error == "" for r in warm), warm

        payload = dump_npy(random_images(IMAGES, SIZE, seed=1))
        replies: list = []
        done_at: list[float] = []

        def submit() -> None:
            calls = [(deployment.name, 1, payload, {"timeout": TIMEOUT_S})] * REQUESTS
            replies.extend(broker_submit(redis_url, *calls))
            done_at.append(time.monotonic())

        sender = threading.Thread(target=submit)
        sender.start()
        holder = wait_until(lambda: _holders(client), 20, "a worker to hold a batch", every=0.002)
        victim_id = next(iter(holder))
        victim = workers[int(victim_id.rpartition(":")[2])]
        os.kill(victim.pid, signal.SIGKILL)  # no clean-up of any kind
        killed_at = time.monotonic()
        victim.wait(timeout=10)
        sender.join(timeout=TIMEOUT_S + 5)
        assert not sender.is_alive()
    finally:
        for proc in workers.values():
            if proc.poll() is None:
                _stop(proc)

    took = done_at[0] - killed_at
    assert took < ANSWERED_WITHIN_S, f"the last reply came {took:.1f} s after the kill"
    assert took > ALIVE_TTL_S / 2  # the dead worker's requests were among them (they wait for its key to expire)
    assert len(replies) == REQUESTS
    for reply in replies:
        assert reply.error in ("", DIED_TWICE), reply.error
        if not reply.error:
            assert len(reply.results) == IMAGES and reply.worker != victim_id
    assert any(r.error == "" for r in replies)
    assert not client.llen(queue_key(deployment.name))  # nothing left behind in the queue
    assert not client.exists(HELD_PREFIX + victim_id)


def _worker_ids(client, workers: dict) -> list[str]:
    """The ids (host:pid) the workers gave themselves in their heartbeats, once every one has beaten."""
    from inference.broker import WORKERS_KEY

    ids = [raw.decode() for raw in client.hkeys(WORKERS_KEY)]
    mine = [w for w in ids if int(w.rpartition(":")[2]) in workers]
    return mine if len(mine) == len(workers) else [f"missing-{pid}" for pid in workers]
