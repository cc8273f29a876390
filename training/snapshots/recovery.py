"""Snapshot builds survive their workers: the job sweep (`SNAPSHOT_BUILDS`) requeues a build whose heartbeat
went silent for SNAPSHOT_STALE_AFTER_SECONDS (the next build starts over), fails it with the reason after
SNAPSHOT_MAX_ATTEMPTS lost builds, and sends again a build whose message is gone before any worker took it."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from common.jobs.services import JobKind, Sweep

from ..jobs.lost_messages import jobs_resend_lost
from ..models import DatasetSnapshot
from .services import snapshot_enqueue


def _send(snapshot_id: int) -> None:
    snapshot_enqueue(snapshot_id=snapshot_id)


def _resend_lost(now: datetime) -> Sweep:
    waiting = DatasetSnapshot.objects.filter(status=DatasetSnapshot.Status.BUILDING, heartbeat_at__isnull=True)
    after = settings.SNAPSHOT_STALE_AFTER_SECONDS
    return Sweep(
        resent=jobs_resend_lost(
            waiting, now=now, after_seconds=after, queue=settings.CELERY_QUEUE_DEFAULT, enqueue=_send
        )
    )


SNAPSHOT_BUILDS = JobKind(
    name="snapshots",
    model=DatasetSnapshot,
    enqueue=_send,
    stale_after_setting="SNAPSHOT_STALE_AFTER_SECONDS",
    max_attempts_setting="SNAPSHOT_MAX_ATTEMPTS",
    hint="was the worker killed or out of memory while it wrote the files?",
    sweep_waiting=_resend_lost,
)
