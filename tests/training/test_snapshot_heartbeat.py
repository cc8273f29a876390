"""A snapshot build keeps a heartbeat from a thread (common.jobs.services.JobHeartbeat): a build that writes no progress
for longer than SNAPSHOT_STALE_AFTER_SECONDS is not swept while its process lives, and is swept (requeued)
once that process is killed with `kill -9`."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
import redis

from common.jobs.services import jobs_recover_stale
from tests.conftest import _spawn, _stop
from tests.waiting import wait_until
from training.models import DatasetSnapshot
from training.snapshots.recovery import SNAPSHOT_BUILDS
from training.snapshots.services import snapshot_create

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUEUE = "snapshot-heartbeat-test"  # the requeued build's message: never taken by the session's worker
STALE_AFTER_S = 3


def test_a_silent_build_is_kept_alive_by_its_heartbeat_and_swept_once_its_worker_is_killed(
    labeled_project, process_env, settings
):
    settings.CELERY_QUEUE_DEFAULT = QUEUE
    settings.SNAPSHOT_STALE_AFTER_SECONDS = STALE_AFTER_S
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete(QUEUE)
    snapshot = snapshot_create(project=labeled_project, options={"trend": False}, build=False)
    env = {**process_env, "JOBS_HEARTBEAT_SECONDS": "1", "SNAPSHOT_STALE_AFTER_SECONDS": str(STALE_AFTER_S)}
    worker = _spawn([sys.executable, "-m", "tests.training.silent_build", str(snapshot.pk)], env, "silent-build.log")
    try:
        rows = DatasetSnapshot.objects.filter(pk=snapshot.pk)
        wait_until(lambda: rows.filter(attempt=1, heartbeat_at__isnull=False).exists(), 60, "the build to start")
        first_beat = rows.get().heartbeat_at
        silent_until = time.monotonic() + 2 * STALE_AFTER_S  # twice the limit without a progress write
        while time.monotonic() < silent_until:
            assert jobs_recover_stale(SNAPSHOT_BUILDS).requeued == [], "a live build was swept"
            time.sleep(0.5)
        alive = rows.get()
        assert alive.status == "building" and alive.attempt == 1 and alive.frames_done == 0  # no progress...
        assert alive.heartbeat_at > first_beat  # ...but a fresh heartbeat

        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        killed_at = time.monotonic()
        swept = wait_until(lambda: jobs_recover_stale(SNAPSHOT_BUILDS).requeued, STALE_AFTER_S + 10, "the sweep")
        assert swept == [snapshot.pk] and time.monotonic() - killed_at >= STALE_AFTER_S - 1.5
        requeued = rows.get()
        assert requeued.status == "building" and requeued.heartbeat_at is None  # the next build may claim it
        assert broker.llen(QUEUE) == 1  # its fresh message
    finally:
        if worker.poll() is None:
            _stop(worker)
        broker.delete(QUEUE)
