"""Snapshot builds survive their workers: the sweep `snapshots_recover_stale` (Celery beat, default queue)
requeues a build whose heartbeat went silent, fails it with the reason after SNAPSHOT_MAX_ATTEMPTS lost
builds, and re-sends a build whose message is gone before any worker took it."""

from __future__ import annotations

import functools
import logging
from dataclasses import asdict, dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ..models import DatasetSnapshot
from ..services import broker_task_ids
from .services import snapshot_enqueue

logger = logging.getLogger(__name__)


@dataclass
class SnapshotSweep:
    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    resent: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def snapshots_recover_stale(*, now=None) -> SnapshotSweep:
    """Requeue building snapshots whose build wrote no progress for SNAPSHOT_STALE_AFTER_SECONDS (their
    worker died; the next build starts over), or fail them once SNAPSHOT_MAX_ATTEMPTS builds were lost;
    re-send builds never started whose broker message is gone. Liveness is the heartbeat's age only."""
    now = now or timezone.now()
    stale_after = timedelta(seconds=settings.SNAPSHOT_STALE_AFTER_SECONDS)
    max_attempts = settings.SNAPSHOT_MAX_ATTEMPTS
    outcome = SnapshotSweep()
    building = DatasetSnapshot.objects.filter(status=DatasetSnapshot.Status.BUILDING)
    stale = building.filter(heartbeat_at__lt=now - stale_after)
    for snapshot_id, attempt in stale.values_list("pk", "attempt"):
        mine = stale.filter(pk=snapshot_id, attempt=attempt)  # not if the build wrote progress meanwhile
        silence = f"its build wrote no progress for over {int(stale_after.total_seconds())} s (worker lost?)"
        if attempt >= max_attempts:
            reason = f"{silence}; gave up after {attempt} of {max_attempts} builds (SNAPSHOT_MAX_ATTEMPTS)"
            if mine.update(status=DatasetSnapshot.Status.FAILED, error=reason, finished_at=now):
                outcome.failed.append(snapshot_id)
            continue
        with transaction.atomic():
            if mine.update(heartbeat_at=None):  # waiting again: the next build may claim it
                outcome.requeued.append(snapshot_id)
                transaction.on_commit(functools.partial(snapshot_enqueue, snapshot_id=snapshot_id))
    waiting = building.filter(heartbeat_at__isnull=True).exclude(pk__in=outcome.requeued)
    waiting = waiting.filter(Q(enqueued_at__lt=now - stale_after) | Q(enqueued_at__isnull=True))
    candidates = list(waiting.values_list("pk", "celery_task_id"))
    if candidates:
        present = broker_task_ids(settings.CELERY_QUEUE_DEFAULT)
        for snapshot_id, task_id in candidates:
            if present is None or task_id in present:  # unreadable broker: nothing re-sent on a guess
                continue
            logger.warning("snapshot %s: its build's message is not in the broker; sending it again", snapshot_id)
            snapshot_enqueue(snapshot_id=snapshot_id)
            outcome.resent.append(snapshot_id)
    return outcome
