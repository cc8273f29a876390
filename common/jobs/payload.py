"""A job's progress as every job page shows it, the same keys for every kind (no Django import: page data
types are read without it; `api.JobProgressOut` gives APIs the same fields)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from typing_extensions import TypedDict  # pydantic (tests) needs typing_extensions' TypedDict on 3.11

if TYPE_CHECKING:
    from .models import Job


class JobProgress(TypedDict):
    """A job's status and progress, the same for every kind of job."""

    status: str
    progress: float  # 0..1
    percent: int  # 0..100, rounded down
    finished: bool
    attempt: int
    error: str
    started_at: str | None
    heartbeat_at: str | None
    finished_at: str | None


def job_progress_payload(job: Job) -> JobProgress:
    """The job's status and progress for a page (its template, its page data or its pushes)."""
    return {
        "status": job.status,
        "progress": job.progress,
        "percent": job.percent,
        "finished": job.finished,
        "attempt": job.attempt,
        "error": job.error,
        "started_at": _iso(job.started_at),
        "heartbeat_at": _iso(job.heartbeat_at),
        "finished_at": _iso(job.finished_at),
    }


def _iso(moment: datetime | None) -> str | None:
    """As the APIs write a time (DRF): in the current time zone, UTC as `Z`."""
    if moment is None:
        return None
    from django.utils import timezone

    text = timezone.localtime(moment).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
