"""Snapshot builds survive their workers (no worker process here): the sweep requeues a build whose
heartbeat went silent, fails it with the reason after SNAPSHOT_MAX_ATTEMPTS builds, re-sends a build whose
message is gone; a duplicate message never starts a second build, and a build that comes back after it was
requeued stops at its next progress write."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.utils import timezone

from common.jobs.broker_messages import waiting_task_ids
from common.jobs.services import jobs_recover_stale
from training.models import DatasetSnapshot
from training.snapshots.recovery import SNAPSHOT_BUILDS
from training.snapshots.services import BuildProgress, BuildSuperseded, snapshot_build, snapshot_create

QUEUE = "snapshot-recovery-test"


@pytest.fixture
def broker(settings):
    """The builds' messages go to a queue of this test's own, read back from Redis and emptied after."""
    settings.CELERY_QUEUE_DEFAULT = QUEUE
    settings.SNAPSHOT_STALE_AFTER_SECONDS = 60
    settings.SNAPSHOT_MAX_ATTEMPTS = 2
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(QUEUE)
    yield lambda: waiting_task_ids(settings.CELERY_BROKER_URL, QUEUE)
    client.delete(QUEUE)


def _building(project, *, silent_for: float | None, attempt: int) -> DatasetSnapshot:
    snapshot = snapshot_create(project=project, options={"trend": False}, build=False)
    heartbeat = None if silent_for is None else timezone.now() - timedelta(seconds=silent_for)
    DatasetSnapshot.objects.filter(pk=snapshot.pk).update(
        heartbeat_at=heartbeat, attempt=attempt, enqueued_at=timezone.now() - timedelta(seconds=600)
    )
    return DatasetSnapshot.objects.get(pk=snapshot.pk)


@pytest.mark.django_db
def test_sweep_requeues_a_silent_build_and_fails_it_after_the_last_attempt(
    labeled_project, broker, client, user, django_capture_on_commit_callbacks
):
    silent = _building(labeled_project, silent_for=600, attempt=1)
    exhausted = _building(labeled_project, silent_for=600, attempt=2)
    alive = _building(labeled_project, silent_for=1, attempt=1)

    with django_capture_on_commit_callbacks(execute=True):
        outcome = jobs_recover_stale(SNAPSHOT_BUILDS)

    assert (outcome.requeued, outcome.failed, outcome.resent) == ([silent.pk], [exhausted.pk], [])
    rows = {s.pk: s for s in DatasetSnapshot.objects.all()}
    assert rows[silent.pk].status == "building" and rows[silent.pk].heartbeat_at is None
    assert rows[silent.pk].celery_task_id in broker()  # a fresh message for the next worker
    assert rows[exhausted.pk].status == "failed" and rows[exhausted.pk].finished_at is not None
    assert "no heartbeat from its worker for over 60 s" in rows[exhausted.pk].error
    assert "gave up after 2 of 2 attempts (SNAPSHOT_MAX_ATTEMPTS)" in rows[exhausted.pk].error
    assert rows[alive.pk].status == "building" and rows[alive.pk].heartbeat_at is not None

    client.force_login(user)  # the reason is on the snapshot's progress page
    page = client.get(f"/snapshots/{exhausted.pk}/").content.decode()
    assert "gave up after 2 of 2 attempts" in page and 'id="snapshot-error"' in page

    assert snapshot_build(snapshot_id=silent.pk) == "ready"  # what the requeued message runs
    assert DatasetSnapshot.objects.get(pk=silent.pk).attempt == 2


@pytest.mark.django_db
def test_a_build_requeued_while_it_was_only_slow_stops_at_its_next_progress_write(labeled_project, broker, monkeypatch):
    from training.snapshots import services as snapshot_services

    slow = _building(labeled_project, silent_for=None, attempt=0)
    DatasetSnapshot.objects.filter(pk=slow.pk).update(attempt=1, heartbeat_at=timezone.now())
    old_build = BuildProgress(slow.pk, total=10, every=1, attempt=1)  # attempt 1 is writing...
    DatasetSnapshot.objects.filter(pk=slow.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=600))
    assert jobs_recover_stale(SNAPSHOT_BUILDS).requeued == [slow.pk]  # ...went silent, and was requeued
    real_write, refused = snapshot_services._write_files, []

    def old_build_comes_back(row, folder, attempt):
        with pytest.raises(BuildSuperseded):
            old_build.counting(lambda ref: ref)(0)  # while attempt 2 builds, attempt 1 may write nothing
        refused.append(attempt)
        return real_write(row, folder, attempt)

    monkeypatch.setattr(snapshot_services, "_write_files", old_build_comes_back)
    assert snapshot_build(snapshot_id=slow.pk) == "ready" and refused == [2]
    row = DatasetSnapshot.objects.get(pk=slow.pk)
    assert (row.status, row.attempt, row.frames_done) == ("ready", 2, row.frames_total)


@pytest.mark.django_db
def test_a_duplicate_message_never_starts_a_second_build_of_a_live_one(labeled_project, broker):
    snapshot = _building(labeled_project, silent_for=5, attempt=1)  # a build is writing it right now
    assert snapshot_build(snapshot_id=snapshot.pk) == "building"
    row = DatasetSnapshot.objects.get(pk=snapshot.pk)
    assert (row.status, row.attempt) == ("building", 1)


@pytest.mark.django_db
def test_sweep_resends_a_build_whose_message_is_gone_and_only_then(labeled_project, broker, settings, monkeypatch):
    from common.jobs import lost_messages

    waiting = _building(labeled_project, silent_for=None, attempt=0)
    assert jobs_recover_stale(SNAPSHOT_BUILDS).resent == [waiting.pk]  # no message for it in the broker
    sent = DatasetSnapshot.objects.get(pk=waiting.pk)
    assert sent.celery_task_id in broker() and sent.attempt == 0

    later = timezone.now() + timedelta(seconds=120)
    assert jobs_recover_stale(SNAPSHOT_BUILDS, now=later).resent == []  # its message waits: nothing more is sent
    monkeypatch.setattr(lost_messages, "broker_task_ids", lambda queue: None)
    assert jobs_recover_stale(SNAPSHOT_BUILDS, now=later).resent == []  # an unreadable broker: nothing sent on a guess
    assert broker() == {sent.celery_task_id}
