"""The dynamic batcher and the worker loop on real Redis, with a stand-in scorer (no model, no Django)."""

from __future__ import annotations

import os
import threading
import time
import uuid

import numpy as np
import pytest
import redis as redis_lib

from inference.broker import InferenceRequest, WorkerError, dump_npy, queue_key
from inference.workers.batching import Batcher, BatchPolicy, score_requests
from inference.workers.loop import InferenceWorker

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
    assert batcher.collect("b", ListSource(["c"], arrivals=["late"])) == ["b", "c", "late"]  # two queued: waits
    assert batcher.collect("d", ListSource([], arrivals=["late"])) == ["d", "late"]  # concurrency seen: waits


class TimedQueue:
    """A request queue on a fake clock: `arrivals` are (time in s, request); waiting advances the clock."""

    def __init__(self, arrivals):
        self.now = 0.0
        self.arrivals = sorted(arrivals)
        self.waits = 0

    def clock(self):
        return self.now

    def pop_now(self, max_count):
        due = [item for at, item in self.arrivals if at <= self.now][:max_count]
        self.arrivals = [(at, item) for at, item in self.arrivals if item not in due]
        return due

    def pop_wait(self, timeout_s):
        self.waits += 1
        if self.arrivals and self.arrivals[0][0] <= self.now + timeout_s:
            self.now = max(self.now, self.arrivals[0][0])
            return self.arrivals.pop(0)[1]
        self.now += timeout_s
        return None


def test_concurrent_clients_coming_back_at_different_times_form_one_batch():
    batcher = Batcher(BatchPolicy(max_batch_size=8, max_wait_ms=5))
    queue = TimedQueue([(0.0, f"c{i}") for i in range(1, 8)])  # eight clients' first requests, queued together
    batcher.clock = queue.clock
    assert batcher.collect("c0", queue) == [f"c{i}" for i in range(8)]
    # their replies went out together; each client sends again 0.5 ms after the previous one
    queue = TimedQueue([(i * 0.0005, f"c{i}") for i in range(1, 8)])
    batcher.clock = queue.clock
    assert batcher.collect("c0", queue, drained=True) == [f"c{i}" for i in range(8)]  # one forward pass
    assert queue.now == pytest.approx(0.0035)  # it stopped waiting when the batch was full, not at 5 ms


def test_a_batch_that_came_apart_is_waited_for_until_whole_again():
    batcher = Batcher(BatchPolicy(max_batch_size=8, max_wait_ms=5))
    queue = TimedQueue([(0.0, "a1"), (0.0, "a2")])
    batcher.clock = queue.clock
    assert batcher.collect("a0", queue) == ["a0", "a1", "a2"]  # three clients
    # one round later the first client comes back alone, the others 1 and 4 ms later: still one batch
    queue = TimedQueue([(0.001, "a1"), (0.004, "a2")])
    batcher.clock = queue.clock
    assert batcher.collect("a0", queue, drained=True) == ["a0", "a1", "a2"]
    assert queue.now == pytest.approx(0.005)  # the batch was not full: it waited max_wait_ms, no longer


def test_a_lone_client_is_never_delayed():
    batcher = Batcher(BatchPolicy(max_batch_size=8, max_wait_ms=50))
    for i in range(20):
        queue = TimedQueue([(0.010, "next")])  # its next request only comes after this one is answered
        batcher.clock = queue.clock
        assert batcher.collect(f"r{i}", queue, drained=True) == [f"r{i}"]
        assert queue.now == 0.0 and queue.waits == 0  # served at once: no wait, not even a queue round trip


def test_a_client_left_alone_stops_paying_the_wait_after_a_few_batches():
    batcher = Batcher(BatchPolicy(max_batch_size=8, max_wait_ms=5), recent=4)
    assert batcher.collect("a", ListSource(["b", "c"])) == ["a", "b", "c"]  # three clients
    waited = []
    for i in range(6):  # the others left: one request at a time from here on
        queue = TimedQueue([])
        batcher.clock = queue.clock
        assert batcher.collect(f"r{i}", queue, drained=True) == [f"r{i}"]
        waited.append(queue.now)
    assert waited == [pytest.approx(0.005)] * 4 + [0.0] * 2  # until the busy batch leaves the last 4


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
    assert batcher.collect("a", Untouchable(), drained=True) == ["a"]
    # two requests came together: other clients exist, so this batch waits (and asks the queue)
    assert batcher.collect("b", ListSource([], arrivals=["late"]), ["c"], drained=True) == ["b", "c", "late"]


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


def test_a_stopping_worker_puts_back_the_request_it_took_with_its_last_replies(redis):
    name = f"d-{uuid.uuid4().hex[:8]}"
    image = dump_npy(np.zeros((1, 4, 4, 3), np.uint8))
    first, second = (InferenceRequest(name, 1, image, time.time() + 30) for _ in range(2))
    stop = threading.Event()

    class StoppingScorer(MeanScorer):
        def score(self, batch):
            redis.lpush(queue_key(name), second.encode())  # arrives while the first is scored
            stop.set()
            return super().score(batch)

    worker = _worker(redis, name, {"version": 1, "count": 0}, [], lambda v: StoppingScorer())
    redis.lpush(queue_key(name), first.encode())
    worker.run(stop)
    assert redis.llen(first.reply_key) == 1  # answered, and in the same round trip the second was taken...
    assert [InferenceRequest.decode(m).id for m in redis.lrange(queue_key(name), 0, -1)] == [
        second.id
    ]  # ...and put back


def test_the_worker_keeps_its_database_connection_and_replaces_a_dropped_one(monkeypatch):
    from django.db import OperationalError, connection

    from inference.management.commands.inference_worker import read_on_kept_connection

    closed, calls = [], []
    monkeypatch.setattr(connection, "close", lambda: closed.append(True))

    def flaky() -> list[str]:
        calls.append(True)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return ["pick-cube"]

    assert read_on_kept_connection(lambda: ["pick-cube"]) == ["pick-cube"] and closed == []  # kept open
    assert read_on_kept_connection(flaky) == ["pick-cube"] and len(calls) == 2 and closed == [True]

    def down() -> list[str]:
        raise OperationalError("could not connect")

    with pytest.raises(OperationalError):
        read_on_kept_connection(down)
