"""The Reporter that runners get inside a Celery task: saves points to the job row (throttled) and
pushes them to the Channels group `job_<id>`, which the job page listens to."""

from __future__ import annotations

import logging
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from common.jobs.models import JobStatus
from common.jobs.services import job_progress

from ..kit.reporting import Eta
from ..models import JobMetric, TrainingJob

logger = logging.getLogger(__name__)


def job_group(job_id: int) -> str:
    return f"job_{job_id}"


def push(job_id: int, message: dict[str, Any]) -> None:
    """Send one event to the job page's listeners; a missing or failing channel layer never stops training."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(job_group(job_id), {"type": "job.event", "message": message})
    except Exception:  # Redis down: the page still gets the history from the database on reconnect
        logger.warning("could not push an event for job %s", job_id, exc_info=True)


def point_payload(point: JobMetric) -> dict[str, Any]:
    return {"kind": point.kind, "step": point.step, "epoch": point.epoch, **point.values}


class JobReporter:
    """Buffers metric points and log lines; flushes to the database and the group every `interval` s."""

    def __init__(
        self,
        job_id: int,
        *,
        attempt: int,
        interval: float = 1.0,
        cancel_check_interval: float = 1.0,
        clock=time.monotonic,
    ):
        self.job_id = job_id
        self.attempt = attempt
        self.interval = interval
        self.cancel_check_interval = cancel_check_interval
        self._clock = clock
        self._eta = Eta(clock)
        self._points: list[JobMetric] = []
        self._lines: list[str] = []
        self._progress = 0.0
        self._eta_seconds: float | None = None
        self._last_flush = clock()
        self._last_cancel_check = -1e9
        self._cancelled = False

    def report_step(self, step: int, total: int, **metrics: float) -> None:
        self._progress, self._eta_seconds = self._eta.update(step, total)
        self._points.append(JobMetric(job_id=self.job_id, kind=JobMetric.Kind.STEP, step=step, values=_clean(metrics)))
        self._maybe_flush()

    def report_epoch(self, epoch: int, *, step: int, **metrics: float) -> None:
        point = JobMetric(job_id=self.job_id, kind=JobMetric.Kind.EPOCH, step=step, epoch=epoch, values=_clean(metrics))
        self._points.append(point)
        self.flush()

    def log(self, line: str) -> None:
        stamp = timezone.now().strftime("%H:%M:%S")
        self._lines.append(f"[{stamp}] {line}")
        logger.info("job %s: %s", self.job_id, line)
        self._maybe_flush()

    def should_cancel(self) -> bool:
        now = self._clock()
        if not self._cancelled and now - self._last_cancel_check >= self.cancel_check_interval:
            self._last_cancel_check = now
            row = TrainingJob.objects.filter(pk=self.job_id).values("status", "cancel_requested", "attempt").first()
            self._cancelled = (
                row is None
                or row["cancel_requested"]
                or row["status"] != JobStatus.RUNNING
                or row["attempt"] != self.attempt
            )
        return self._cancelled

    def resumed(self, *, step: int) -> None:
        """The run goes on from a checkpoint after `step`: points a lost run reported after it are dropped."""
        self._points = [p for p in self._points if p.step <= step]
        JobMetric.objects.filter(job_id=self.job_id, step__gt=step).delete()
        push(self.job_id, {"event": "resumed", "step": step})

    def flush(self) -> None:
        points, lines = self._points, self._lines
        self._points, self._lines = [], []
        self._last_flush = self._clock()
        if points:
            JobMetric.objects.bulk_create(points)
        fields: dict[str, Any] = {"eta_seconds": self._eta_seconds}
        if lines:
            fields["log"] = Concat(F("log"), Value("".join(line + "\n" for line in lines)))
        job_progress(TrainingJob, pk=self.job_id, attempt=self.attempt, progress=self._progress, **fields)
        push(
            self.job_id,
            {
                "event": "progress",
                "progress": self._progress,
                "eta_seconds": self._eta_seconds,
                "points": [point_payload(p) for p in points],
                "log": lines,
            },
        )

    def _maybe_flush(self) -> None:
        if self._clock() - self._last_flush >= self.interval:
            self.flush()


def _clean(metrics: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, value in metrics.items():
        value = float(value)
        out[key] = value if value == value and abs(value) != float("inf") else None
    return out
