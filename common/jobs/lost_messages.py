"""Queued jobs whose broker message is gone (Redis restarted without persistence, a purge) are sent again: a
job keeps the task id of its last message (`Job.celery_task_id`), so the sweep can tell (for the kinds that
name their queue, `JobKind.queue_setting`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet

logger = logging.getLogger(__name__)


def jobs_resend_lost(
    waiting: QuerySet, *, now: datetime, after_seconds: int, queue: str, enqueue: Callable[[int], None]
) -> list[int]:
    """Send again each job of `waiting` (queued, no run holding it) whose message went out over `after_seconds`
    ago (or never) and no longer waits in `queue`; the jobs sent. Nothing is sent on a guess when the broker
    cannot be read."""
    old = waiting.filter(Q(enqueued_at__lt=now - timedelta(seconds=after_seconds)) | Q(enqueued_at__isnull=True))
    candidates = list(old.values_list("pk", "celery_task_id"))
    if not candidates:
        return []
    present = broker_task_ids(queue)
    if present is None:
        return []
    resent = []
    for pk, task_id in candidates:
        if task_id in present:
            continue
        logger.warning("%s %s: its message is not in the broker; sending it again", waiting.model.__name__, pk)
        enqueue(pk)
        resent.append(pk)
    return resent


def broker_task_ids(queue: str) -> set[str] | None:
    """Task ids of the messages waiting in `queue` on the Redis broker; None when they cannot be read
    (another broker, or Redis unreachable)."""
    from .broker_messages import waiting_task_ids

    try:
        return waiting_task_ids(settings.CELERY_BROKER_URL, queue)
    except Exception:
        logger.warning("could not read the %s queue from the broker", queue, exc_info=True)
        return None
