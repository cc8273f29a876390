"""Small JSON shapes shared by the pages, the API and the WebSocket."""

from __future__ import annotations

from .models import TrainedModel, TrainingJob
from .page_data import JobState


def job_state(job_id: int) -> JobState | None:
    job = TrainingJob.objects.filter(pk=job_id).select_related("snapshot").first()
    return None if job is None else job_state_of(job)


def job_state_of(job: TrainingJob) -> JobState:
    return {
        "job": job.pk,
        "kind": job.kind,
        "status": job.status,
        "cancel_requested": job.cancel_requested,
        "progress": job.progress,
        "eta_seconds": job.eta_seconds,
        "error": job.error,
        "log": job.log[-20000:],
        "summary": job.summary,
        "models": list(TrainedModel.objects.filter(job_id=job.pk).values_list("pk", flat=True)),
        "epochs": (job.config or {}).get("epochs"),
    }
