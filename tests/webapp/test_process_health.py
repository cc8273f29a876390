"""Health reports a process that is down: Celery workers stamp the queues they consume and beat stamps each
heartbeat it sends; /healthz and the banner on every page read those stamps, so a killed beat reads as down
within its heartbeat's time to live."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from tests.conftest import _spawn, _stop
from webapp.monitoring.heartbeats import BEAT_KEY, heartbeat_ttl, processes_up

pytestmark = pytest.mark.django_db(transaction=True)

BEAT_INTERVAL_S = 1


@pytest.fixture
def redis_client(settings):
    import redis

    return redis.Redis.from_url(settings.REDIS_URL)


@pytest.fixture
def beat_process(process_env, tmp_path, redis_client):
    redis_client.delete(BEAT_KEY)
    env = {**process_env, "HEARTBEAT_SECONDS": str(BEAT_INTERVAL_S), "TRAINING_SWEEP_SECONDS": "3600"}
    schedule = tmp_path / "celerybeat-schedule"
    args = [sys.executable, "-m", "celery", "-A", "webapp", "beat", "--loglevel", "INFO", "--schedule", str(schedule)]
    proc = _spawn(args, env, "celery-beat.log")
    yield proc
    if proc.poll() is None:
        _stop(proc)


def _processes(client) -> dict:
    return client.get("/healthz").json()["processes"]


def _wait_for(predicate, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s")


def test_a_killed_beat_reads_as_down_within_its_ttl_and_the_banner_names_it(
    client, user, settings, celery_worker_process, beat_process
):
    settings.HEALTH_BANNER_CACHE_SECONDS = 0
    # beat sends its first heartbeat at start; the worker stamps the queues it consumes (all four here)
    _wait_for(lambda: _processes(client)["beat"], timeout=60)
    _wait_for(lambda: _processes(client)["worker"], timeout=30)
    up = _processes(client)
    # an inference worker may be up or not, by what earlier tests of the session left running
    assert {k: v for k, v in up.items() if k not in ("ok", "inference")} == {
        "web": True,
        "worker": True,
        "training": True,
        "beat": True,
    }
    assert up["ok"] == up["inference"]

    beat_process.send_signal(signal.SIGKILL)
    beat_process.wait()
    took = _wait_for(lambda: not _processes(client)["beat"], timeout=heartbeat_ttl(BEAT_INTERVAL_S) + 2)
    assert took <= heartbeat_ttl(BEAT_INTERVAL_S) + 1
    response = client.get("/healthz")
    assert response.status_code == 503 and response.json()["processes"]["worker"] is True

    client.force_login(user)
    page = client.get("/").content.decode()
    assert "Down: Celery beat" in page and ("inference worker" in page) != up["inference"]


def test_stamps_expire_and_a_worker_kind_needs_every_queue_it_consumes(redis_client, monkeypatch):
    from webapp.monitoring import heartbeats
    from webapp.monitoring.heartbeats import queues_stamp

    monkeypatch.setattr(heartbeats, "QUEUE_KEY", "rs:test:alive:queue:")  # apart from a running worker's stamps
    queues_stamp(redis_client, ["default", "inference"], ttl=1)
    assert processes_up(redis_client)["worker"] is False  # nobody consumes `ingest`
    queues_stamp(redis_client, ["ingest"], ttl=1)
    assert processes_up(redis_client)["worker"] is True
    time.sleep(1.2)
    assert processes_up(redis_client)["worker"] is False


def test_the_banner_is_cached_and_absent_for_anonymous_pages(client, user, settings, redis_client):
    from webapp import context_processors

    settings.HEALTH_BANNER_CACHE_SECONDS = 60
    context_processors._cached = (0.0, [])
    client.force_login(user)
    assert "Celery beat" in client.get("/").content.decode()
    redis_client.set(BEAT_KEY, time.time(), ex=5)
    assert "Celery beat" in client.get("/").content.decode()  # read once, then cached
    context_processors._cached = (0.0, [])
    assert "Celery beat" not in client.get("/").content.decode()
    client.logout()
    assert "Down:" not in client.get("/accounts/login/").content.decode()
