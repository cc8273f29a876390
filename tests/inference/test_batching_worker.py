"""The dynamic batcher and the worker loop on real Redis, with a stand-in scorer (no model, no Django)."""

from __future__ import annotations

import os
import threading
import time
import uuid

import numpy as np
import pytest
import redis as redis_lib

from inference.batching import Batcher, BatchPolicy, score_requests
from inference.broker import InferenceRequest, WorkerError, dump_npy, queue_key
from inference.worker import InferenceWorker

from .conftest import broker_submit


class MeanScorer:
    """Scores an image by its mean pixel value / 255 and records every batch it saw."""

    def __init__(self, delay_s: float = 0.0, offset: float = 0.0):
        self.batches: list[int] = []
        self.delay_s = delay_s
        self.offset = offset

    def score(self, batch: np.ndarray) -> list[float]:
        self.batches.append(len(batch))
        time.sleep(self.delay_s)
        return [float(x.mean()) / 255.0 + self.offset for x in batch]


class ListSource:
    def __init__(self, items, arrivals=None):
        self.items = list(items)
        self.arrivals = list(arrivals or [])

    def pop_now(self, max_count):
        taken, self.items = self.items[:max_count], self.items[max_count:]
        return taken

    def pop_wait(self, timeout_s):
        if self.arrivals:
            return self.arrivals.pop(0)
        return None


def test_batcher_drains_queue_up_to_max_batch_size():
    batcher = Batcher(BatchPolicy(max_batch_size=4, max_wait_ms=0), adaptive=False)
    batch = batcher.collect(0, ListSource([1, 2, 3, 4, 5]))
    assert batch == [0, 1, 2, 3]


def test_batcher_waits_for_late_arrivals_only_after_seeing_concurrency():
    batcher = Batcher(BatchPolicy(max_batch_size=8, max_wait_ms=50))
    assert batcher.collect("a", ListSource([], arrivals=["late"])) == ["a"]  # lone client: no wait
    assert batcher.collect("b", ListSource(["c"], arrivals=["late"])) == ["b", "c"]  # still no wait
    assert batcher.collect("d", ListSource([], arrivals=["late"])) == ["d", "late"]  # concurrency seen: waits


def test_batcher_counts_items_not_requests():
    batcher = Batcher(BatchPolicy(max_batch_size=10, max_wait_ms=50), size=len, adaptive=False)
    # 12 items reached the limit of 10: no waiting for the late arrival (score_requests chunks the forward)
    assert batcher.collect([1] * 6, ListSource([[2] * 6], arrivals=[[3]])) == [[1] * 6, [2] * 6]
    assert batcher.collect([1] * 2, ListSource([[2] * 2], arrivals=[[3]])) == [[1] * 2, [2] * 2, [3]]


def test_batcher_skips_the_queue_when_just_drained_and_not_waiting():
    class Untouchable:
        def pop_now(self, max_count):
            raise AssertionError("no round trip expected")

        pop_wait = pop_now

    batcher = Batcher(BatchPolicy(max_batch_size=8, max_wait_ms=5))
    assert batcher.collect("a", Untouchable(), ["b"], drained=True) == ["a", "b"]
    # two requests came together: concurrency seen, so the next batch waits (and asks the queue)
    assert batcher.collect("c", ListSource([], arrivals=["late"]), drained=True) == ["c", "late"]


def test_score_requests_splits_results_back_and_chunks_by_max_batch():
    scorer = MeanScorer()
    arrays = [np.full((n, 4, 4, 3), v, np.uint8) for n, v in [(3, 10), (1, 20), (5, 30)]]
    odd = np.full((2, 8, 8, 3), 40, np.uint8)  # another image size: its own forward pass
    results = score_requests([*arrays, odd], scorer.score, max_batch_size=4)
    assert [len(r) for r in results] == [3, 1, 5, 2]
    assert results[1] == [pytest.approx(20 / 255)]
    assert results[3] == [pytest.approx(40 / 255)] * 2
    assert sorted(scorer.batches) == [1, 2, 4, 4]


URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/5")


@pytest.fixture
def redis():
    client = redis_lib.Redis.from_url(URL)
    yield client
    for key in client.scan_iter("rs:inf:*"):
        client.delete(key)


def _worker(redis, name, loads, health, scorer_for_version):
    def load(deployment):
        version = loads["version"]
        loads["count"] += 1
        if loads.get("fail"):
            raise FileNotFoundError("checkpoint folder is missing")
        return version, scorer_for_version(version)

    return InferenceWorker(
        redis, load_model=load, report_health=lambda *args: health.append(args), list_deployments=lambda: [name]
    )


def _run(worker):
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    return stop, thread


def test_worker_batches_concurrent_requests_into_fewer_forward_passes(redis):
    name = f"d-{uuid.uuid4().hex[:8]}"
    scorer = MeanScorer(delay_s=0.05)
    loads, health = {"version": 1, "count": 0}, []
    worker = _worker(redis, name, loads, health, lambda v: scorer)
    stop, thread = _run(worker)
    try:
        images = [np.full((1, 8, 8, 3), i * 10, np.uint8) for i in range(16)]
        replies = broker_submit(URL, *((name, 1, dump_npy(a), {"timeout": 10, "max_wait_ms": 5}) for a in images))
    finally:
        stop.set()
        thread.join(5)
    assert [r.unwrap()[0] for r in replies] == pytest.approx([i * 10 / 255 for i in range(16)])
    assert sum(scorer.batches) == 16
    assert len(scorer.batches) < 16  # requests shared forward passes
    assert loads["count"] == 1
    assert health == [(name, 1, "")]


def test_worker_reports_load_failure_and_answers_with_the_error(redis):
    name = f"d-{uuid.uuid4().hex[:8]}"
    loads, health = {"version": 3, "count": 0, "fail": True}, []
    worker = _worker(redis, name, loads, health, lambda v: MeanScorer())
    stop, thread = _run(worker)
    try:
        [reply] = broker_submit(URL, (name, 3, dump_npy(np.zeros((1, 4, 4, 3), np.uint8)), {"timeout": 10}))
    finally:
        stop.set()
        thread.join(5)
    with pytest.raises(WorkerError, match="checkpoint folder is missing"):
        reply.unwrap()
    assert health[-1][0] == name and health[-1][1] is None and "failed to load" in health[-1][2]


def test_worker_reloads_on_newer_version_and_skips_expired_requests(redis):
    name = f"d-{uuid.uuid4().hex[:8]}"
    loads, health = {"version": 1, "count": 0}, []
    worker = _worker(redis, name, loads, health, lambda v: MeanScorer(offset=v))
    image = dump_npy(np.zeros((1, 4, 4, 3), np.uint8))
    # an expired request left in the queue is skipped, not scored
    expired = InferenceRequest(deployment=name, version=1, payload=image, deadline=time.time() - 1)
    redis.lpush(queue_key(name), expired.encode())
    assert worker.poll_once() == 0
    stop, thread = _run(worker)
    try:
        assert broker_submit(URL, (name, 1, image, {"timeout": 10}))[0].unwrap() == [1.0]
        loads["version"] = 2
        assert broker_submit(URL, (name, 2, image, {"timeout": 10}))[0].unwrap() == [2.0]
        assert broker_submit(URL, (name, 1, image, {"timeout": 10}))[0].unwrap() == [2.0]  # never goes back
    finally:
        stop.set()
        thread.join(5)
    assert loads["count"] == 2
