"""Writes for the training app: snapshots, jobs (guarded status transitions) and trained models."""

from __future__ import annotations

import functools
import logging
import os
import shutil
import socket
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, ProtectedError, Q, Value
from django.db.models.functions import Concat
from django.utils import timezone

from labeling import job_liveness
from labeling.models import Project
from webhooks import events
from webhooks.services import webhook_emit_safely

from .jobs import launch
from .jobs.errors import failure_reason
from .jobs.limits import job_config_check, paths_confine
from .jobs.reporter import JobReporter, push
from .kit.family_parts import RunResult
from .kit.reporting import JobCancelled
from .models import FINISHED_STATUSES, DatasetSnapshot, JobMetric, JobStatus, TrainedModel, TrainingJob
from .storage import local_path

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


def _transition(
    job_id: int,
    source: tuple[str, ...] | str,
    target: str,
    *,
    notify: bool = True,
    attempt: int | None = None,
    **fields,
) -> bool:
    """Move a job from one of `source` to `target` if it is still there (and still in `attempt`, when given);
    False when another actor won."""
    sources = (source,) if isinstance(source, str) else source
    if target in FINISHED_STATUSES:
        fields.setdefault("finished_at", timezone.now())
    rows = TrainingJob.objects.filter(pk=job_id, status__in=sources)
    if attempt is not None:
        rows = rows.filter(attempt=attempt)
    changed = rows.update(status=target, **fields) == 1
    if changed and notify:
        push(job_id, {"event": "status", "status": target, **_status_extra(job_id)})
    if changed and target == JobStatus.FAILED:
        _emit_job_event(job_id, events.JOB_FAILED)
    return changed


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
    row: Mapping[str, Any] = (
        TrainingJob.objects.filter(pk=job_id).values("progress", "eta_seconds", "error").first() or {}
    )
    models = list(TrainedModel.objects.filter(job_id=job_id).values_list("pk", flat=True))
    return {**row, "models": models}


def job_execute(*, job_id: int, worker: str = "") -> str:
    """Run a queued job to its end in this process. Idempotent: a job not queued is left alone.

    Each start counts an attempt; every later write of this run is guarded by it, so a run that lost its
    job to a requeue (it was presumed dead) cannot touch the run that took over."""
    worker = worker or f"{socket.gethostname()}:{os.getpid()}"
    now = timezone.now()
    started = TrainingJob.objects.filter(pk=job_id, status=JobStatus.QUEUED, cancel_requested=False).update(
        status=JobStatus.RUNNING, started_at=now, heartbeat_at=now, worker=worker, attempt=F("attempt") + 1
    )
    if not started:
        return "skipped"
    push(job_id, {"event": "status", "status": JobStatus.RUNNING})
    job = TrainingJob.objects.select_related("project", "snapshot").get(pk=job_id)
    attempt = job.attempt
    reporter = JobReporter(job_id, attempt=attempt)
    with job_heartbeat(job_id, attempt=attempt):
        outcome = _run(job, reporter, worker)
    if not isinstance(outcome, RunResult):
        return outcome
    result = outcome
    with transaction.atomic():
        # the status moves first: a job that the sweep failed meanwhile gets no model
        if not _transition(
            job_id,
            JobStatus.RUNNING,
            JobStatus.SUCCEEDED,
            notify=False,
            attempt=attempt,
            progress=1.0,
            eta_seconds=0.0,
            summary=result.metrics,
        ):
            return TrainingJob.objects.get(pk=job_id).status
        TrainedModel.objects.create(
            project=job.project,
            job=job,
            snapshot=job.snapshot,
            kind=job.kind,
            name=model_name(job, result.name),
            checkpoint_path=result.checkpoint_path,
            config=result.config or job.config,
            metrics=result.metrics,
        )
    push(job_id, {"event": "status", "status": JobStatus.SUCCEEDED, **_status_extra(job_id)})
    _emit_job_event(job_id, events.JOB_SUCCEEDED)
    return JobStatus.SUCCEEDED


def _run(job: TrainingJob, reporter: JobReporter, worker: str) -> RunResult | str:
    job_id, attempt = job.pk, job.attempt
    try:
        from .families import family

        runner = family(job.kind).trainer
        reporter.log(f"{job.kind} job started on {worker} (attempt {attempt} of {settings.TRAINING_MAX_ATTEMPTS})")
        job.config = paths_confine(job.kind, job.config)  # again here: MODEL_DIR may have changed since
        result = launch.job_run(job, reporter, runner)  # in this process, or under torchrun
        reporter.log("training finished")
        reporter.flush()
        return result
    except JobCancelled:
        reporter.log("cancelled")
        reporter.flush()
        _transition(job_id, JobStatus.RUNNING, JobStatus.CANCELLED, attempt=attempt, eta_seconds=None)
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
        _transition(
            job_id,
            JobStatus.RUNNING,
            JobStatus.FAILED,
            attempt=attempt,
            error=reason,
            error_detail=traceback.format_exc(),
            eta_seconds=None,
        )
        return JobStatus.FAILED


def job_heartbeat(job_id: int, *, attempt: int, interval: float | None = None) -> job_liveness.Heartbeat:
    """Keeps a running job's heartbeat fresh from a thread (labeling.job_liveness), also while the runner
    loads data or models for minutes without reporting; it stops with the process, so a killed worker's job
    goes stale."""
    return job_liveness.Heartbeat(
        TrainingJob,
        job_id,
        status=JobStatus.RUNNING,
        attempt=attempt,
        field="heartbeat_at",
        interval=interval if interval is not None else float(settings.TRAINING_HEARTBEAT_SECONDS),
    )


def job_cancel(*, job: TrainingJob) -> TrainingJob:
    """A queued job is cancelled at once; a running one stops at its next batch."""
    if _transition(job.pk, JobStatus.QUEUED, JobStatus.CANCELLED):
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
        _transition(job.pk, JobStatus.QUEUED, JobStatus.CANCELLED)
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


@dataclass
class SweepOutcome:
    requeued: list[int]
    failed: list[int]
    resent: list[int]

    def as_dict(self) -> dict:
        return asdict(self)


def jobs_recover_stale(*, now=None) -> SweepOutcome:
    """Requeue running jobs whose heartbeat is older than TRAINING_STALE_AFTER_SECONDS (their worker died;
    the next run resumes from the job's checkpoint), or fail them once TRAINING_MAX_ATTEMPTS runs were lost;
    re-send queued jobs whose broker message is gone. Liveness is the heartbeat's age only."""
    now = now or timezone.now()
    stale_after = timedelta(seconds=settings.TRAINING_STALE_AFTER_SECONDS)
    max_attempts = settings.TRAINING_MAX_ATTEMPTS
    outcome = SweepOutcome([], [], [])
    stale = TrainingJob.objects.filter(status=JobStatus.RUNNING, heartbeat_at__lt=now - stale_after)
    workers = dict(stale.values_list("pk", "worker"))

    def silence(job_id: int) -> str:
        return f"no heartbeat from worker {workers.get(job_id) or '?'} for over {int(stale_after.total_seconds())} s"

    def fail(rows, job_id: int, attempt: int) -> bool:
        reason = f"{silence(job_id)}; gave up after {attempt} of {max_attempts} attempts (TRAINING_MAX_ATTEMPTS)"
        return _transition(job_id, JobStatus.RUNNING, JobStatus.FAILED, attempt=attempt, error=reason, eta_seconds=None)

    def requeue(rows, job_id: int, attempt: int) -> bool:
        note = f"[{timezone.now():%H:%M:%S}] {silence(job_id)}: requeued (attempt {attempt} of {max_attempts} lost)\n"
        with transaction.atomic():
            moved = _transition(
                job_id,
                JobStatus.RUNNING,
                JobStatus.QUEUED,
                attempt=attempt,
                log=Concat(F("log"), Value(note)),
                eta_seconds=None,
            )
            if moved:
                transaction.on_commit(functools.partial(job_enqueue, job_id=job_id))
        return moved

    swept = job_liveness.stale_sweep(stale, max_attempts=max_attempts, requeue=requeue, fail=fail)
    outcome.requeued, outcome.failed = swept.requeued, swept.failed
    waiting = TrainingJob.objects.filter(status=JobStatus.QUEUED, cancel_requested=False).exclude(
        pk__in=outcome.requeued
    )
    waiting = waiting.filter(Q(enqueued_at__lt=now - stale_after) | Q(enqueued_at__isnull=True))
    candidates = list(waiting.values_list("pk", "celery_task_id"))
    if candidates:
        present = broker_task_ids(settings.CELERY_QUEUE_TRAINING)
        for job_id, task_id in candidates:
            if present is None or task_id in present:  # unreadable broker: nothing is re-sent on a guess
                continue
            logger.warning("training job %s: its message is not in the broker; sending it again", job_id)
            job_enqueue(job_id=job_id)
            outcome.resent.append(job_id)
    return outcome


def broker_task_ids(queue: str) -> set[str] | None:
    """Task ids of the messages waiting in `queue` on the Redis broker; None when they cannot be read
    (another broker, or Redis unreachable): then no queued job is re-sent on a guess."""
    from .jobs.broker_messages import waiting_task_ids

    try:
        return waiting_task_ids(settings.CELERY_BROKER_URL, queue)
    except Exception:
        logger.warning("could not read the %s queue from the broker", queue, exc_info=True)
        return None


def _delete_folder(name: str) -> None:
    try:
        path = local_path(name)
    except RuntimeError:
        return
    shutil.rmtree(path, ignore_errors=True)
