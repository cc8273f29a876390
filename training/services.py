"""Writes for the training app: snapshots, jobs (guarded status transitions) and trained models."""

from __future__ import annotations

import logging
import os
import socket
import traceback
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, ProtectedError, Q, Value
from django.db.models.functions import Concat
from django.utils import timezone

from common.filestore.services import folder_published, stored_folder_delete, stored_republish, work_folder_drop
from common.jobs.models import JobStatus
from common.jobs.payload import job_progress_payload
from common.jobs.services import JobHeartbeat, JobKind, job_claim, job_finish
from projects.models import Project
from webhooks import events
from webhooks.services import webhook_emit_safely

from .evaluation.precompute import evaluation_precompute
from .jobs import launch
from .jobs.errors import failure_reason
from .jobs.limits import host_check, job_config_check, paths_confine
from .jobs.process_settings import job_process_settings
from .jobs.reporter import JobReporter, push
from .kit.family_parts import RunResult
from .kit.reporting import JobCancelled
from .models import DatasetSnapshot, JobMetric, TrainedModel, TrainingJob

logger = logging.getLogger(__name__)


class JobError(ValueError):
    """A request that the job's current state does not allow; the message says why."""


# ---- jobs -------------------------------------------------------------------------------------------


def default_job_name(kind: str, snapshot_number: int) -> str:
    return f"{kind} on snapshot #{snapshot_number}"


def model_name(job: TrainingJob, trainer_name: str) -> str:
    """The trained model's name: the job's own name when a person gave it one (with the job number, the number
    the pages link by), else what the trainer suggests."""
    if job.name and job.name != default_job_name(job.kind, job.snapshot.number if job.snapshot else 0):
        return f"{job.name} (job {job.pk})"
    return trainer_name or f"{job.project.name} {job.kind} job {job.pk}"


def job_create(
    *,
    project: Project,
    snapshot: DatasetSnapshot,
    kind: str = "resnet",
    config: dict | None = None,
    name: str = "",
    created_by=None,
    enqueue: bool = True,
) -> TrainingJob:
    """Validate the config for its kind, store the job as queued and send it to the `training` queue."""
    if snapshot.project_id != project.pk:
        raise JobError("the snapshot belongs to another project")
    if snapshot.status != DatasetSnapshot.Status.READY:
        raise JobError(f"snapshot #{snapshot.number} is {snapshot.status}, not ready")
    normalised = job_config_check(kind, config or {})  # paths inside MODEL_DIR, processes within the host
    job = TrainingJob.objects.create(
        project=project,
        snapshot=snapshot,
        kind=kind,
        name=name or default_job_name(kind, snapshot.number),
        config=normalised,
        created_by=created_by,
    )
    if enqueue:
        transaction.on_commit(lambda: job_enqueue(job_id=job.pk))
    return job


def job_enqueue(*, job_id: int) -> None:
    """Send the job's message (again, for a requeued job or a lost message); the newest task id is kept."""
    from .tasks import run_training_job

    result = run_training_job.apply_async(args=[job_id], queue=settings.CELERY_QUEUE_TRAINING)
    TrainingJob.objects.filter(pk=job_id).update(celery_task_id=result.id, enqueued_at=timezone.now())


def _finish(
    job_id: int,
    status: str,
    *,
    notify: bool = True,
    attempt: int | None = None,
    source: tuple[str, ...] | None = None,
    **fields,
) -> bool:
    """End a job (`job_finish`: the run in `attempt`, or from `source`) and announce it; False when another
    actor won."""
    if not job_finish(TrainingJob, pk=job_id, status=status, attempt=attempt, source=source, **fields):
        return False
    if notify:
        push(job_id, {"event": "status", **_status_extra(job_id)})
    if status == JobStatus.FAILED:
        _emit_job_event(job_id, events.JOB_FAILED)
    return True


def _emit_job_event(job_id: int, event: str) -> None:
    row = TrainingJob.objects.filter(pk=job_id).values("project_id", "kind", "status", "error", "summary").first()
    if row is None:
        return
    models = list(TrainedModel.objects.filter(job_id=job_id).values("id", "name"))
    data: dict[str, Any] = {
        "job": {"id": job_id, **{k: row[k] for k in ("kind", "status", "summary")}},
        "models": models,
    }
    data["job"]["error"] = (row["error"] or "")[-2000:]
    webhook_emit_safely(project_id=row["project_id"], event=event, data=data)


def _status_extra(job_id: int) -> dict:
    """What a status push carries: the job's progress payload, its ETA and its models (nothing once deleted)."""
    job = TrainingJob.objects.filter(pk=job_id).first()
    if job is None:
        return {}
    models = list(TrainedModel.objects.filter(job_id=job_id).values_list("pk", flat=True))
    return {**job_progress_payload(job), "eta_seconds": job.eta_seconds, "models": models}


def job_execute(*, job_id: int, worker: str = "") -> str:
    """Run a queued job to its end in this process. Idempotent: a job not queued is left alone.

    Each start counts an attempt; every later write of this run is guarded by it, so a run that lost its
    job to a requeue (it was presumed dead) cannot touch the run that took over."""
    worker = worker or f"{socket.gethostname()}:{os.getpid()}"
    attempt = job_claim(TrainingJob, pk=job_id, where=Q(cancel_requested=False), worker=worker)
    if attempt is None:
        return "skipped"
    push(job_id, {"event": "status", "status": JobStatus.RUNNING})
    job = TrainingJob.objects.select_related("project", "snapshot").get(pk=job_id)
    reporter = JobReporter(job_id, attempt=attempt)
    with job_heartbeat(job_id, attempt=attempt), job_process_settings():  # no job's threads leak into the next
        outcome = _run(job, reporter, worker)
    if not isinstance(outcome, RunResult):
        return outcome
    result = outcome
    # the checkpoint is complete in storage before any row points at it (a worker killed mid-upload leaves
    # no manifest, no model; the retried job publishes again)
    folder_published(job.checkpoint_folder)
    with transaction.atomic():
        # the status moves first: a job that the sweep failed meanwhile gets no model
        if not _finish(
            job_id, JobStatus.SUCCEEDED, notify=False, attempt=attempt, eta_seconds=0.0, summary=result.metrics
        ):
            return TrainingJob.objects.get(pk=job_id).status
        model = TrainedModel.objects.create(
            project=job.project,
            job=job,
            snapshot=job.snapshot,
            kind=job.kind,
            name=model_name(job, result.name),
            checkpoint_path=result.checkpoint_path,
            config=result.config or job.config,
            metrics=result.metrics,
        )
    evaluation_precompute(model=model)  # before the page learns of the model: its first open scores nothing
    stored_republish(model.checkpoint_path)  # the figures beside the checkpoint, for every machine
    work_folder_drop(job.checkpoint_folder)
    push(job_id, {"event": "status", **_status_extra(job_id)})
    _emit_job_event(job_id, events.JOB_SUCCEEDED)
    return JobStatus.SUCCEEDED


def _run(job: TrainingJob, reporter: JobReporter, worker: str) -> RunResult | str:
    job_id, attempt = job.pk, job.attempt
    try:
        from .families import family

        runner = family(job.kind).trainer
        reporter.log(f"{job.kind} job started on {worker} (attempt {attempt} of {settings.TRAINING_MAX_ATTEMPTS})")
        job.config = paths_confine(job.kind, job.config)  # again here: MODEL_DIR may have changed since
        host_check(job.config)  # again here: the settings may have changed since
        result = launch.job_run(job, reporter, runner)  # in this process, or under torchrun
        reporter.log("training finished")
        reporter.flush()
        return result
    except JobCancelled:
        reporter.log("cancelled")
        reporter.flush()
        _finish(job_id, JobStatus.CANCELLED, attempt=attempt, eta_seconds=None)
        return JobStatus.CANCELLED
    except Exception as exc:
        logger.exception("training job %s failed", job_id)
        # users see one line (page, API, WebSocket, webhooks); the traceback stays in the log and the admin
        reason = failure_reason(exc, prefix_type=not isinstance(exc, launch.JobFailure | ValueError))
        reporter.log(f"failed: {reason}")
        try:
            reporter.flush()
        except Exception:
            logger.exception("could not flush the reporter of job %s", job_id)
        _finish(
            job_id,
            JobStatus.FAILED,
            attempt=attempt,
            error=reason,
            error_detail=traceback.format_exc(),
            eta_seconds=None,
        )
        return JobStatus.FAILED


def job_heartbeat(job_id: int, *, attempt: int, interval: float | None = None) -> JobHeartbeat:
    """Keeps a running job's heartbeat fresh from a thread (`JobHeartbeat`), also while the runner loads data
    or models for minutes without reporting; it stops with the process, so a killed worker's job goes stale."""
    seconds = interval if interval is not None else float(settings.TRAINING_HEARTBEAT_SECONDS)
    return JobHeartbeat(TrainingJob, job_id, attempt=attempt, interval=seconds)


def job_cancel(*, job: TrainingJob) -> TrainingJob:
    """A queued job is cancelled at once; a running one stops at its next batch."""
    if _finish(job.pk, JobStatus.CANCELLED, source=(JobStatus.QUEUED,)):
        pass
    elif TrainingJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(cancel_requested=True):
        push(job.pk, {"event": "status", "status": JobStatus.RUNNING, "cancel_requested": True})
    else:
        job.refresh_from_db()
        raise JobError(f"job {job.pk} is {job.status}; only queued or running jobs can be cancelled")
    job.refresh_from_db()
    return job


def job_retry(*, job: TrainingJob) -> TrainingJob:
    """Run a failed or cancelled job again from scratch (its curves and files are cleared)."""
    with transaction.atomic():
        changed = TrainingJob.objects.filter(pk=job.pk, status__in=(JobStatus.FAILED, JobStatus.CANCELLED)).update(
            status=JobStatus.QUEUED,
            cancel_requested=False,
            progress=0.0,
            eta_seconds=None,
            error="",
            error_detail="",
            log="",
            summary={},
            started_at=None,
            finished_at=None,
            heartbeat_at=None,
            attempt=0,
        )
        if not changed:
            job.refresh_from_db()
            raise JobError(f"job {job.pk} is {job.status}; only failed or cancelled jobs can be retried")
        JobMetric.objects.filter(job_id=job.pk).delete()
        _delete_folder(job.checkpoint_folder)
        transaction.on_commit(lambda: job_enqueue(job_id=job.pk))
    push(job.pk, {"event": "status", "status": JobStatus.QUEUED, "reset": True})
    job.refresh_from_db()
    return job


def job_delete(*, job: TrainingJob) -> None:
    """Delete a finished or queued job with its models and checkpoint files; a running one must be cancelled first."""
    if job.status == JobStatus.QUEUED:
        _finish(job.pk, JobStatus.CANCELLED, source=(JobStatus.QUEUED,))
    job.refresh_from_db()
    if job.status == JobStatus.RUNNING:
        raise JobError(f"job {job.pk} is running; cancel it first")
    folder = job.checkpoint_folder
    try:
        with transaction.atomic():
            TrainedModel.objects.filter(job=job).delete()
            job.delete()
            transaction.on_commit(lambda: _delete_folder(folder))
    except ProtectedError as exc:
        users = ", ".join(sorted({str(obj) for obj in exc.protected_objects}))
        raise JobError(f"job {job.pk}'s model is still in use ({users}); remove that first") from None


def _requeued(job_id: int, note: str) -> None:
    line = f"[{timezone.now():%H:%M:%S}] {note}\n"
    TrainingJob.objects.filter(pk=job_id).update(log=Concat(F("log"), Value(line)), eta_seconds=None)
    push(job_id, {"event": "status", **_status_extra(job_id)})


def _failed(job_id: int) -> None:
    TrainingJob.objects.filter(pk=job_id).update(eta_seconds=None)
    push(job_id, {"event": "status", **_status_extra(job_id)})
    _emit_job_event(job_id, events.JOB_FAILED)


def _send(job_id: int) -> None:
    job_enqueue(job_id=job_id)


# The sweep requeues a running job whose heartbeat is older than TRAINING_STALE_AFTER_SECONDS (its worker
# died; the next run resumes from the job's checkpoint), fails it once TRAINING_MAX_ATTEMPTS runs were lost,
# and sends again a queued job whose broker message is gone.
TRAINING_JOBS = JobKind(
    name="training",
    model=TrainingJob,
    enqueue=_send,
    stale_after_setting="TRAINING_STALE_AFTER_SECONDS",
    max_attempts_setting="TRAINING_MAX_ATTEMPTS",
    hint="was the training worker killed or out of memory? Retry the job.",
    on_requeued=_requeued,
    on_failed=_failed,
    queue_setting="CELERY_QUEUE_TRAINING",
    resend_filter={"cancel_requested": False},
)


def _delete_folder(name: str) -> None:
    stored_folder_delete(name)
