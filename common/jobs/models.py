"""The abstract job row and its status values (no concrete table here: each kind's model inherits `Job`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from django.db import models


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


@dataclass(frozen=True)
class Lifecycle:
    """The status value a kind stores for each step of the lifecycle: the shared `JobStatus` values unless the
    kind's API already published its own (a snapshot is `building`, queued or running, until `ready`). Where
    `queued` and `running` are one value, a run holds the job while `heartbeat_at` is set."""

    queued: str = JobStatus.QUEUED
    running: str = JobStatus.RUNNING
    succeeded: str = JobStatus.SUCCEEDED
    failed: str = JobStatus.FAILED
    cancelled: str | None = JobStatus.CANCELLED

    @property
    def active(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.queued, self.running)))

    @property
    def finished(self) -> tuple[str, ...]:
        return tuple(s for s in (self.succeeded, self.failed, self.cancelled) if s)


class Job(models.Model):
    """A background job's row. It moves only through `common.jobs.services` (guarded updates)."""

    lifecycle: ClassVar[Lifecycle] = Lifecycle()

    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.QUEUED)
    attempt = models.PositiveIntegerField(default=0, help_text="Runs started; a run lost with its worker is requeued.")
    progress = models.FloatField(default=0.0, help_text="0..1")
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life of the running run (empty while none runs)."
    )
    error = models.TextField(blank=True, help_text="Why the job failed, in one line (shown to users).")
    enqueued_at = models.DateTimeField(null=True, blank=True, help_text="When the job's message was last sent.")
    # The task id of that message: a queued job whose message no longer waits in its queue lost it
    # (common/jobs/lost_messages.py).
    celery_task_id = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="When the last run started.")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def finished(self) -> bool:
        return self.status in self.lifecycle.finished

    @property
    def percent(self) -> int:
        return int(100 * self.progress)
