"""Writes for the training app: snapshots, jobs (guarded status transitions) and trained models."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import threading
import traceback
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, ProtectedError
from django.utils import timezone

from labeling.models import Project
from webhooks import events
from webhooks.services import webhook_emit_safely

from . import runners
from .job_reporter import JobReporter, push
from .models import FINISHED_STATUSES, DatasetSnapshot, JobMetric, JobStatus, TrainedModel, TrainingJob
from .reporting import JobCancelled
from .storage import local_path

logger = logging.getLogger(__name__)

STALE_AFTER = timedelta(seconds=getattr(settings, "TRAINING_STALE_AFTER_SECONDS", 120))
HEARTBEAT_SECONDS = 20.0


class JobError(ValueError):
    """A request that the job's current state does not allow; the message says why."""


# ---- jobs -------------------------------------------------------------------------------------------


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
    normalised = runners.validate_config(kind, config or {})
    job = TrainingJob.objects.create(
        project=project,
        snapshot=snapshot,
        kind=kind,
        name=name or f"{kind} on snapshot #{snapshot.number}",
        config=normalised,
        created_by=created_by,
    )
    if enqueue:
        transaction.on_commit(lambda: job_enqueue(job_id=job.pk))
    return job


def job_enqueue(*, job_id: int) -> None:
    from .tasks import run_training_job

    result = run_training_job.apply_async(args=[job_id], queue=settings.CELERY_QUEUE_TRAINING)
    TrainingJob.objects.filter(pk=job_id).update(celery_task_id=result.id)


def _transition(job_id: int, source: tuple[str, ...] | str, target: str, *, notify: bool = True, **fields) -> bool:
    """Move a job from one of `source` to `target` if it is still there; False when another actor won."""
    sources = (source,) if isinstance(source, str) else source
    if target in FINISHED_STATUSES:
        fields.setdefault("finished_at", timezone.now())
    changed = TrainingJob.objects.filter(pk=job_id, status__in=sources).update(status=target, **fields) == 1
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
    data = {"job": {"id": job_id, **{k: row[k] for k in ("kind", "status", "summary")}}, "models": models}
    data["job"]["error"] = (row["error"] or "")[-2000:]
    webhook_emit_safely(project_id=row["project_id"], event=event, data=data)


def _status_extra(job_id: int) -> dict:
    row = TrainingJob.objects.filter(pk=job_id).values("progress", "eta_seconds", "error").first() or {}
    models = list(TrainedModel.objects.filter(job_id=job_id).values_list("pk", flat=True))
    return {**row, "models": models}


def job_execute(*, job_id: int, worker: str = "") -> str:
    """Run a queued job to its end in this process. Idempotent: a job not queued is left alone."""
    worker = worker or f"{socket.gethostname()}:{os.getpid()}"
    now = timezone.now()
    started = TrainingJob.objects.filter(pk=job_id, status=JobStatus.QUEUED, cancel_requested=False).update(
        status=JobStatus.RUNNING, started_at=now, heartbeat_at=now, worker=worker, attempt=F("attempt") + 1
    )
    if not started:
        return "skipped"
    push(job_id, {"event": "status", "status": JobStatus.RUNNING})
    job = TrainingJob.objects.select_related("project", "snapshot").get(pk=job_id)
    reporter = JobReporter(job_id)
    with Heartbeat(job_id):
        outcome = _run(job, reporter, worker)
    if not isinstance(outcome, runners.RunResult):
        return outcome
    result = outcome
    with transaction.atomic():
        # the status moves first: a job that the sweep failed meanwhile gets no model
        if not _transition(
            job_id,
            JobStatus.RUNNING,
            JobStatus.SUCCEEDED,
            notify=False,
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
            name=result.name or f"{job.project.name} {job.kind} job {job.pk}",
            checkpoint_path=result.checkpoint_path,
            config=result.config or job.config,
            metrics=result.metrics,
        )
    push(job_id, {"event": "status", "status": JobStatus.SUCCEEDED, **_status_extra(job_id)})
    _emit_job_event(job_id, events.JOB_SUCCEEDED)
    return JobStatus.SUCCEEDED


def _run(job: TrainingJob, reporter: JobReporter, worker: str) -> runners.RunResult | str:
    job_id = job.pk
    try:
        runner = runners.get_runner(job.kind)
        reporter.log(f"{job.kind} job started on {worker}")
        result = runner(job, reporter)
        reporter.log("training finished")
        reporter.flush()
        return result
    except JobCancelled:
        reporter.log("cancelled")
        reporter.flush()
        _transition(job_id, JobStatus.RUNNING, JobStatus.CANCELLED, eta_seconds=None)
        return JobStatus.CANCELLED
    except Exception as exc:
        logger.exception("training job %s failed", job_id)
        reporter.log(f"failed: {exc.__class__.__name__}: {exc}")
        try:
            reporter.flush()
        except Exception:
            logger.exception("could not flush the reporter of job %s", job_id)
        _transition(job_id, JobStatus.RUNNING, JobStatus.FAILED, error=traceback.format_exc(), eta_seconds=None)
        return JobStatus.FAILED


class Heartbeat:
    """Keeps a running job's heartbeat fresh from a thread, also while the runner loads data or models
    for minutes without reporting; it stops with the process, so a killed worker's job goes stale."""

    def __init__(self, job_id: int, interval: float = HEARTBEAT_SECONDS):
        self.job_id = job_id
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-job-{job_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                TrainingJob.objects.filter(pk=self.job_id, status=JobStatus.RUNNING).update(heartbeat_at=timezone.now())
        except Exception:
            logger.exception("heartbeat of job %s stopped", self.job_id)
        finally:
            connection.close()


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
            log="",
            summary={},
            started_at=None,
            finished_at=None,
            heartbeat_at=None,
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


def jobs_fail_stale(*, older_than: timedelta = STALE_AFTER) -> int:
    """Fail running jobs whose worker is gone: no heartbeat for `older_than`, or a dead process on this host."""
    now = timezone.now()
    running = TrainingJob.objects.filter(status=JobStatus.RUNNING)
    reasons: dict[int, str] = {}
    for job_id in running.filter(heartbeat_at__lt=now - older_than).values_list("pk", flat=True):
        reasons[job_id] = (
            f"no heartbeat from the worker for over {int(older_than.total_seconds())} s (worker killed or lost)"
        )
    host = socket.gethostname()
    for job_id, worker in running.filter(worker__startswith=f"{host}:").values_list("pk", "worker"):
        if not _process_alive(worker.rsplit(":", 1)[-1]):
            reasons[job_id] = f"the worker process {worker} died while running this job"
    count = 0
    for job_id, reason in reasons.items():
        if _transition(job_id, JobStatus.RUNNING, JobStatus.FAILED, error=reason, eta_seconds=None):
            count += 1
    return count


def _process_alive(pid_text: str) -> bool:
    try:
        pid = int(pid_text)
    except ValueError:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _delete_folder(name: str) -> None:
    try:
        path = local_path(name)
    except RuntimeError:
        return
    shutil.rmtree(path, ignore_errors=True)
