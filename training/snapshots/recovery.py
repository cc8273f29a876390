"""Snapshot builds survive their workers: the job sweep (`SNAPSHOT_BUILDS`) requeues a build whose heartbeat
went silent for SNAPSHOT_STALE_AFTER_SECONDS (the next build starts over), fails it with the reason after
SNAPSHOT_MAX_ATTEMPTS lost builds, and sends again a build whose message is gone before any worker took it."""

from __future__ import annotations

from common.jobs.services import JobKind

from ..models import DatasetSnapshot
from .services import snapshot_enqueue


def _send(snapshot_id: int) -> None:
    snapshot_enqueue(snapshot_id=snapshot_id)


SNAPSHOT_BUILDS = JobKind(
    name="snapshots",
    model=DatasetSnapshot,
    enqueue=_send,
    stale_after_setting="SNAPSHOT_STALE_AFTER_SECONDS",
    max_attempts_setting="SNAPSHOT_MAX_ATTEMPTS",
    hint="was the worker killed or out of memory while it wrote the files?",
    queue_setting="CELERY_QUEUE_DEFAULT",
)
