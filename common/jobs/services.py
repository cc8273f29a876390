"""The writes that move a job, generic over the kind's model (a subclass of `Job`).

Every move is a guarded update (`filter(pk=.., status=X).update(status=Y)`): of two actors (a run, a cancel,
the sweep) the first update wins and the other sees it changed nothing. A run's writes are also guarded by
its attempt, so a run the sweep presumed dead cannot touch the run that took its job over.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from .lost_messages import jobs_resend_lost
from .models import Job

logger = logging.getLogger(__name__)


def job_run_rows(model: type[Job], *, pk: int, attempt: int) -> QuerySet:
    """The job while it is still running in `attempt`: a run writes through these rows only."""
    return model._default_manager.filter(pk=pk, status=model.lifecycle.running, attempt=attempt)


def job_claim(model: type[Job], *, pk: int, where: Q | None = None, **fields: Any) -> int | None:
    """Start a run of a queued job (and matching `where`): running, attempt + 1, started and beating now, with
    `fields`. The run's attempt, or None when the job was not waiting (another run has it, or it ended)."""
    now = timezone.now()
    rows = model._default_manager.filter(pk=pk, status=model.lifecycle.queued)
    if where is not None:
        rows = rows.filter(where)
    claimed = rows.update(
        status=model.lifecycle.running, attempt=F("attempt") + 1, started_at=now, heartbeat_at=now, **fields
    )
    if not claimed:
        return None
    return model._default_manager.values_list("attempt", flat=True).get(pk=pk)


def job_progress(model: type[Job], *, pk: int, attempt: int, progress: float | None = None, **fields: Any) -> bool:
    """Record a run's progress (0..1, when given) and `fields` with a fresh heartbeat; False once the run no
    longer holds its job."""
    values: dict[str, Any] = {"heartbeat_at": timezone.now(), **fields}
    if progress is not None:
        values["progress"] = min(1.0, max(0.0, progress))
    return bool(job_run_rows(model, pk=pk, attempt=attempt).update(**values))


def job_finish(
    model: type[Job],
    *,
    pk: int,
    status: str,
    attempt: int | None = None,
    source: tuple[str, ...] | None = None,
    error: str = "",
    **fields: Any,
) -> bool:
    """End a job as succeeded (progress 1), failed (`error`: the reason in one line, for users) or cancelled.

    The run in `attempt` ends its running job; without an attempt (a cancel, an admin) a job in `source` (by
    default any active status) ends. False when the job had already moved on."""
    life = model.lifecycle
    if status not in life.finished:
        raise ValueError(f"{status!r} does not end a {model.__name__}")
    if attempt is not None:
        rows = job_run_rows(model, pk=pk, attempt=attempt)
    else:
        rows = model._default_manager.filter(pk=pk, status__in=source or life.active)
    if status == life.succeeded:
        fields.setdefault("progress", 1.0)
    return bool(rows.update(status=status, error=error, finished_at=timezone.now(), **fields))


class JobHeartbeat:
    """`with JobHeartbeat(ImportJob, pk, attempt=n, interval=20):` writes the time into the job's `heartbeat_at`
    from a thread every `interval` seconds while the block runs (while the job still runs in `attempt`), also
    while the run's own work is silent for minutes; it stops with the process, so a killed worker's job goes
    stale."""

    def __init__(self, model: type[Job], pk: int, *, attempt: int, interval: float):
        self.rows = job_run_rows(model, pk=pk, attempt=attempt)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{model.__name__}-{pk}", daemon=True)

    def __enter__(self) -> JobHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self.rows.update(heartbeat_at=timezone.now())
        except Exception:
            logger.exception("heartbeat of %s stopped", self._thread.name)
        finally:
            connection.close()


@dataclass
class Sweep:
    """What a sweep did to one kind: the jobs it requeued, failed, and whose lost message it sent again."""

    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    resent: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[int]]:
        return asdict(self)


@dataclass(frozen=True)
class JobKind:
    """One kind of job as the sweep sees it. Settings are named (read at each sweep, and quoted in reasons).

    `enqueue(pk)` sends a requeued job's message (once the requeue commits); `on_requeued(pk, note)` and
    `on_failed(pk)` do what else the kind owes a moved job (a log line, a push, a webhook, removed files);
    `queue_setting` names the Celery queue its messages wait in: a queued job (no run holding it, and
    `resend_filter` true of it) whose message went out over the stale limit ago and no longer waits there is
    sent again. `sweep_waiting(now)` is any other look at queued jobs (a job no worker took, failed)."""

    name: str
    model: type[Job]
    enqueue: Callable[[int], None]
    stale_after_setting: str = "JOBS_STALE_AFTER_SECONDS"
    max_attempts_setting: str = "JOBS_MAX_ATTEMPTS"
    hint: str = ""
    on_requeued: Callable[[int, str], None] | None = None
    on_failed: Callable[[int], None] | None = None
    sweep_waiting: Callable[[datetime], Sweep] | None = None
    queue_setting: str | None = None
    resend_filter: dict[str, object] = field(default_factory=dict)


def jobs_recover_stale(kind: JobKind, *, now: datetime | None = None) -> Sweep:
    """A running job whose heartbeat is older than the kind's stale limit lost its worker: it is requeued
    while attempts remain, else failed with the reason in one line. Each move is guarded by the row as the
    sweep saw it (same attempt, still stale), so a run that beat meanwhile keeps its job. Then the kind's own
    look at its queued jobs (`sweep_waiting`)."""
    now = now or timezone.now()
    model, life = kind.model, kind.model.lifecycle
    stale_after = int(getattr(settings, kind.stale_after_setting))
    max_attempts = int(getattr(settings, kind.max_attempts_setting))
    stale = model._default_manager.filter(status=life.running, heartbeat_at__lt=now - timedelta(seconds=stale_after))
    silence = f"no heartbeat from its worker for over {stale_after} s"
    outcome = Sweep()
    for pk, attempt in list(stale.values_list("pk", "attempt")):
        rows = stale.filter(pk=pk, attempt=attempt)
        with transaction.atomic():
            if attempt >= max_attempts:
                reason = f"{silence}; gave up after {attempt} of {max_attempts} attempts ({kind.max_attempts_setting})"
                if not rows.update(
                    status=life.failed, error=f"{reason}; {kind.hint}" if kind.hint else reason, finished_at=now
                ):
                    continue
                outcome.failed.append(pk)
                if kind.on_failed:
                    kind.on_failed(pk)
            elif rows.update(status=life.queued, heartbeat_at=None, enqueued_at=now):
                outcome.requeued.append(pk)
                if kind.on_requeued:
                    kind.on_requeued(pk, f"{silence}: requeued (attempt {attempt} of {max_attempts} lost)")
                transaction.on_commit(functools.partial(kind.enqueue, pk))
    if kind.queue_setting:
        outcome.resent += _resend_lost(kind, now=now, after_seconds=stale_after)
    if kind.sweep_waiting:
        waiting = kind.sweep_waiting(now)
        outcome.failed += waiting.failed
        outcome.resent += waiting.resent
    return outcome


def _resend_lost(kind: JobKind, *, now: datetime, after_seconds: int) -> list[int]:
    """The kind's queued jobs whose broker message is gone, sent again (`lost_messages.jobs_resend_lost`)."""
    life = kind.model.lifecycle
    waiting = kind.model._default_manager.filter(status=life.queued, **kind.resend_filter)
    if life.queued == life.running:  # one value for both: a run holds the job while its heartbeat is set
        waiting = waiting.filter(heartbeat_at__isnull=True)
    queue = str(getattr(settings, kind.queue_setting or ""))
    return jobs_resend_lost(waiting, now=now, after_seconds=after_seconds, queue=queue, enqueue=kind.enqueue)
