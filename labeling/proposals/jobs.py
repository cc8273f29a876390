"""Project-wide proposal generation as a background job: the web process only numbers a ProposalJob row
and queues `labeling.tasks.generate_project_proposals` (queue `ingest`); the task goes through the
project's episodes one transaction at a time, recording progress on the row, and stops after the episode
it is on when someone cancels. One active job per project; a second request gets the running one.

The row moves only by guarded updates (`filter(pk=.., status=X).update(status=Y)`), so a cancel that lands
while the task finishes is decided by whichever update comes first.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..job_liveness import Heartbeat, Sweep, stale_sweep
from ..models import Project, ProposalJob
from .services import GenerateResult, proposals_generate


def proposal_jobs_recover_stale(*, project: Project | None = None, now=None) -> Sweep:
    """Jobs (of `project`, or all) whose worker is gone: a running job whose heartbeat is older than
    JOBS_STALE_AFTER_SECONDS is requeued (the next run goes through the project again; proposals are
    idempotent), or failed with the reason once JOBS_MAX_ATTEMPTS runs were lost; a queued job whose message
    no worker took for longer than a job may run (PROPOSALS_TIME_LIMIT_SECONDS + 60 s) is failed."""
    from ..tasks import generate_project_proposals

    now = now or timezone.now()
    silent = settings.JOBS_STALE_AFTER_SECONDS
    jobs = ProposalJob.objects.all() if project is None else ProposalJob.objects.filter(project=project)
    stale = jobs.filter(status=ProposalJob.Status.RUNNING, updated_at__lt=now - timedelta(seconds=silent))

    def requeue(rows, job_id: int, attempt: int) -> bool:
        with transaction.atomic():
            moved = bool(rows.update(status=ProposalJob.Status.QUEUED, updated_at=now))
            if moved:
                transaction.on_commit(functools.partial(generate_project_proposals.delay, job_id))
        return moved

    def fail(rows, job_id: int, attempt: int) -> bool:
        reason = (
            f"its worker stopped (no heartbeat for over {silent} s) in each of {attempt} runs (JOBS_MAX_ATTEMPTS); "
            "was the ingest worker killed or out of memory?"
        )
        return bool(rows.update(status=ProposalJob.Status.FAILED, error=reason, finished_at=now, updated_at=now))

    outcome = stale_sweep(stale, max_attempts=settings.JOBS_MAX_ATTEMPTS, requeue=requeue, fail=fail)
    waited = settings.PROPOSALS_TIME_LIMIT_SECONDS + 60
    lost = jobs.filter(status=ProposalJob.Status.QUEUED, updated_at__lt=now - timedelta(seconds=waited))
    ids = list(lost.values_list("pk", flat=True))
    reason = (
        f"no worker took this job for over {waited} s, longer than a job may run (PROPOSALS_TIME_LIMIT_SECONDS); "
        "was the ingest worker stopped?"
    )
    lost.filter(pk__in=ids).update(status=ProposalJob.Status.FAILED, error=reason, finished_at=now, updated_at=now)
    outcome.failed += ids
    return outcome


def proposal_job_start(*, project: Project, user=None) -> tuple[ProposalJob, bool]:
    """The project's active generation job, or a new one queued once the transaction commits; True when new."""
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()  # one start at a time per project
        proposal_jobs_recover_stale(project=project)
        active = ProposalJob.objects.filter(project=project, status__in=ProposalJob.ACTIVE)
        running = active.order_by("-created_at").first()
        if running is not None:
            return running, False
        person = user if isinstance(user, get_user_model()) else None  # an agent token is no person
        job = ProposalJob.objects.create(project=project, created_by=person)
        from ..tasks import generate_project_proposals

        transaction.on_commit(lambda: generate_project_proposals.delay(job.pk))
    return job, True


def proposal_job_cancel(*, job: ProposalJob) -> bool:
    """Cancel a queued or running job (the task stops after its current episode); False if it had ended."""
    cancelled = ProposalJob.objects.filter(pk=job.pk, status__in=ProposalJob.ACTIVE).update(
        status=ProposalJob.Status.CANCELLED, finished_at=timezone.now(), updated_at=timezone.now()
    )
    job.refresh_from_db()
    return bool(cancelled)


def proposal_job_run(job_id: int) -> str:
    """Generate the job's proposals (the task's body). Idempotent: a job no longer queued is left alone."""
    job = ProposalJob.objects.select_related("project").filter(pk=job_id).first()
    if job is None:
        return "missing"
    total = job.project.episodes.count()
    started = ProposalJob.objects.filter(pk=job.pk, status=ProposalJob.Status.QUEUED).update(
        status=ProposalJob.Status.RUNNING, total=total, done=0, updated_at=timezone.now(), attempt=F("attempt") + 1
    )
    if not started:
        return job.status
    job.refresh_from_db(fields=["attempt"])
    # this run's writes: only while the job is still running in this run (not cancelled, not requeued)
    mine = ProposalJob.objects.filter(pk=job.pk, status=ProposalJob.Status.RUNNING, attempt=job.attempt)

    def on_episode(result: GenerateResult) -> bool:
        still_running = mine.update(done=min(result.episodes, total), summary=asdict(result), updated_at=timezone.now())
        return bool(still_running)

    status, error = ProposalJob.Status.DONE, ""
    result = GenerateResult()
    heartbeat = Heartbeat(
        ProposalJob,
        job.pk,
        status=ProposalJob.Status.RUNNING,
        attempt=job.attempt,
        field="updated_at",
        interval=settings.JOBS_HEARTBEAT_SECONDS,
    )
    try:
        with heartbeat:
            result = proposals_generate(project=job.project, on_episode=on_episode)
    except Exception as exc:
        if exc.__class__.__name__ != "SoftTimeLimitExceeded":
            mine.update(
                status=ProposalJob.Status.FAILED,
                error=f"{exc.__class__.__name__}: {exc}".splitlines()[0][:500],
                finished_at=timezone.now(),
            )
            raise
        status = ProposalJob.Status.FAILED
        error = f"generation took longer than {settings.PROPOSALS_TIME_LIMIT_SECONDS} s (PROPOSALS_TIME_LIMIT_SECONDS)"
    now = timezone.now()
    fields = {"status": status, "error": error, "finished_at": now, "updated_at": now}
    if status == ProposalJob.Status.DONE:
        fields.update(done=result.episodes, total=max(total, result.episodes), summary=asdict(result))
    ended = mine.update(**fields)
    if not ended and status == ProposalJob.Status.DONE:  # cancelled meanwhile: keep what the episodes done did
        ProposalJob.objects.filter(pk=job.pk).update(done=min(result.episodes, total), summary=asdict(result))
    job.refresh_from_db()
    return job.status
