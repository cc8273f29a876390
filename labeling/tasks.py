"""Background work of the labeling app (queue `ingest`)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from .models import Episode
from .proposals.services import proposals_generate


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, max_retries=5, ignore_result=True)
def generate_episode_proposals(episode_id: int) -> int:
    """Proposals for a finished episode, so they wait ready when someone opens it. Idempotent.

    Queued by every finished episode and never waited on: it keeps no result, so queuing it does not
    subscribe the web process to a result channel (Redis result backend) that nothing would ever drain."""
    episode = Episode.objects.select_related("project").filter(pk=episode_id).first()
    if episode is None:
        return 0
    return proposals_generate(project=episode.project, episodes=Episode.objects.filter(pk=episode_id)).episodes


@shared_task(
    soft_time_limit=settings.IMPORT_TIME_LIMIT_SECONDS,
    time_limit=settings.IMPORT_TIME_LIMIT_SECONDS + 30,
    acks_late=False,
)
def run_import_job(job_id: int) -> str:
    """Import an uploaded batch of files (labeling.imports.jobs); never retried: a job ends done or failed."""
    from .imports.jobs import import_job_run

    job = import_job_run(job_id)
    return job.status if job else "missing"


@shared_task(
    soft_time_limit=settings.PROPOSALS_TIME_LIMIT_SECONDS,
    time_limit=settings.PROPOSALS_TIME_LIMIT_SECONDS + 30,
    acks_late=False,
)
def generate_project_proposals(job_id: int) -> str:
    """Proposals for every episode of a project (labeling.proposals.jobs); never retried: the job ends done,
    failed or cancelled."""
    from .proposals.jobs import proposal_job_run

    return proposal_job_run(job_id)


@shared_task
def sweep_orphan_frames() -> dict:
    """Scheduled by beat every ORPHAN_FRAMES_SWEEP_SECONDS (default queue): frame files no row names, older
    than ORPHAN_FRAMES_GRACE_SECONDS, are removed (labeling.orphan_frames)."""
    from .orphan_frames import orphan_frames_sweep

    return orphan_frames_sweep().as_dict()


@shared_task(
    soft_time_limit=settings.IMPORT_TIME_LIMIT_SECONDS,
    time_limit=settings.IMPORT_TIME_LIMIT_SECONDS + 30,
    acks_late=False,
    ignore_result=True,
)
def run_lerobot_export(token: str) -> str:
    """Write a project's LeRobot export for download (labeling.imports.lerobot.export_jobs); never retried."""
    from .imports.lerobot.export_jobs import export_job_run

    return export_job_run(token)
