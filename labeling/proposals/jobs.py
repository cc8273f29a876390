"""Project-wide proposal generation as a background job: the web process only numbers a ProposalJob row
and queues `labeling.tasks.generate_project_proposals` (queue `ingest`); the task goes through the
project's episodes one transaction at a time, recording progress on the row, and stops after the episode
it is on when someone cancels. One active job per project; a second request gets the running one.

The row moves only by guarded updates (`filter(pk=.., status=X).update(status=Y)`), so a cancel that lands
while the task finishes is decided by whichever update comes first.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from common.jobs.models import JobStatus
from common.jobs.services import (
    JobHeartbeat,
    JobKind,
    Sweep,
    job_claim,
    job_finish,
    job_progress,
    jobs_recover_stale,
)
from projects.models import Project

from ..models import ProposalJob
from .services import GenerateResult, proposals_generate


def _enqueue(job_id: int) -> None:
    from ..tasks import generate_project_proposals

    generate_project_proposals.delay(job_id)


def proposal_jobs_fail_untaken(now: datetime) -> Sweep:
    """Fail queued jobs whose message no worker took for longer than a job may run
    (PROPOSALS_TIME_LIMIT_SECONDS + 60 s): the ingest worker is not there to run them."""
    waited = settings.PROPOSALS_TIME_LIMIT_SECONDS + 60
    lost = ProposalJob.objects.filter(status=JobStatus.QUEUED, enqueued_at__lt=now - timedelta(seconds=waited))
    ids = list(lost.values_list("pk", flat=True))
    reason = (
        f"no worker took this job for over {waited} s, longer than a job may run (PROPOSALS_TIME_LIMIT_SECONDS); "
        "was the ingest worker stopped?"
    )
    lost.filter(pk__in=ids).update(status=JobStatus.FAILED, error=reason, finished_at=now)
    return Sweep(failed=ids)


# The sweep requeues a job whose worker died (the next run goes through the project again; proposals are
# idempotent), or fails it once JOBS_MAX_ATTEMPTS runs were lost, and fails queued jobs no worker took.
PROPOSAL_JOBS = JobKind(
    name="proposals",
    model=ProposalJob,
    enqueue=_enqueue,
    hint="was the ingest worker killed or out of memory?",
    sweep_waiting=proposal_jobs_fail_untaken,
)


def proposal_job_start(*, project: Project, user=None) -> tuple[ProposalJob, bool]:
    """The project's active generation job, or a new one queued once the transaction commits; True when new."""
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()  # one start at a time per project
        jobs_recover_stale(PROPOSAL_JOBS)  # a job whose worker died blocks no new one
        active = ProposalJob.objects.filter(project=project, status__in=ProposalJob.lifecycle.active)
        running = active.order_by("-created_at").first()
        if running is not None:
            return running, False
        person = user if isinstance(user, get_user_model()) else None  # an agent token is no person
        job = ProposalJob.objects.create(project=project, created_by=person, enqueued_at=timezone.now())
        transaction.on_commit(lambda: _enqueue(job.pk))
    return job, True


def proposal_job_cancel(*, job: ProposalJob) -> bool:
    """Cancel a queued or running job (the task stops after its current episode); False if it had ended."""
    cancelled = job_finish(ProposalJob, pk=job.pk, status=JobStatus.CANCELLED)
    job.refresh_from_db()
    return cancelled


def proposal_job_run(job_id: int) -> str:
    """Generate the job's proposals (the task's body). Idempotent: a job no longer queued is left alone."""
    job = ProposalJob.objects.select_related("project").filter(pk=job_id).first()
    if job is None:
        return "missing"
    total = job.project.episodes.count()
    attempt = job_claim(ProposalJob, pk=job.pk, total=total, done=0, progress=0.0)
    if attempt is None:
        return job.status

    # this run's writes: only while the job is still running in this run (not cancelled, not requeued)
    def on_episode(result: GenerateResult) -> bool:
        done = min(result.episodes, total)
        fraction = done / total if total else 0.0
        return job_progress(
            ProposalJob, pk=job.pk, attempt=attempt, progress=fraction, done=done, summary=asdict(result)
        )

    status, error = JobStatus.SUCCEEDED, ""
    result = GenerateResult()
    try:
        with JobHeartbeat(ProposalJob, job.pk, attempt=attempt, interval=settings.JOBS_HEARTBEAT_SECONDS):
            result = proposals_generate(project=job.project, on_episode=on_episode)
    except Exception as exc:
        if exc.__class__.__name__ != "SoftTimeLimitExceeded":
            reason = f"{exc.__class__.__name__}: {exc}".splitlines()[0][:500]
            job_finish(ProposalJob, pk=job.pk, attempt=attempt, status=JobStatus.FAILED, error=reason)
            raise
        status = JobStatus.FAILED
        error = f"generation took longer than {settings.PROPOSALS_TIME_LIMIT_SECONDS} s (PROPOSALS_TIME_LIMIT_SECONDS)"
    fields: dict[str, Any] = {}
    if status == JobStatus.SUCCEEDED:
        fields = {"done": result.episodes, "total": max(total, result.episodes), "summary": asdict(result)}
    ended = job_finish(ProposalJob, pk=job.pk, attempt=attempt, status=status, error=error, **fields)
    if not ended and status == JobStatus.SUCCEEDED:  # cancelled meanwhile: keep what the episodes done did
        ProposalJob.objects.filter(pk=job.pk).update(done=min(result.episodes, total), summary=asdict(result))
    job.refresh_from_db()
    return job.status
