"""Celery tasks of the training app (queue `training`): thin wrappers over services."""

from __future__ import annotations

import logging
import os
import socket

from celery import current_app, shared_task
from celery.signals import worker_ready

logger = logging.getLogger(__name__)

# `celery beat` (see Procfile) sweeps for jobs whose worker died; pages and the job list sweep too.
STALE_SWEEP_SECONDS = 60.0
RETRAIN_SWEEP_SECONDS = 30.0  # train-to-target loops: look for projects with enough new labels
current_app.conf.beat_schedule = {
    **(current_app.conf.beat_schedule or {}),
    "training-fail-stale-jobs": {"task": "training.tasks.fail_stale_jobs", "schedule": STALE_SWEEP_SECONDS},
    "training-retrain-sweep": {"task": "training.tasks.retrain_sweep", "schedule": RETRAIN_SWEEP_SECONDS},
}


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@shared_task(name="training.tasks.run_training_job", acks_late=False)
def run_training_job(job_id: int) -> str:
    from .models import JobStatus
    from .services import job_execute

    status = job_execute(job_id=job_id, worker=_worker_name())
    if status == JobStatus.SUCCEEDED:  # a new model: re-rank the labeling queue, maybe redeploy
        after_training_job.delay(job_id)
    return status


@shared_task(name="training.tasks.fail_stale_jobs")
def fail_stale_jobs() -> int:
    from .services import jobs_fail_stale

    return jobs_fail_stale()


@shared_task(name="training.tasks.build_snapshot")
def build_snapshot(snapshot_id: int) -> str:
    from .snapshot_services import snapshot_build

    return snapshot_build(snapshot_id=snapshot_id)


@shared_task(name="training.tasks.recompute_label_queue")
def recompute_label_queue(project_id: int) -> int:
    from labeling.models import Project

    from .label_queue import label_queue_recompute

    project = Project.objects.filter(pk=project_id).first()
    return label_queue_recompute(project=project) if project else 0


@shared_task(name="training.tasks.after_training_job")
def after_training_job(job_id: int) -> None:
    from .retrain import after_training

    after_training(job_id=job_id)


@shared_task(name="training.tasks.retrain_sweep")
def retrain_sweep() -> int:
    from .retrain import retrain_sweep as sweep

    return sweep()


@worker_ready.connect
def _sweep_on_start(sender=None, **kwargs) -> None:
    from .services import jobs_fail_stale

    try:
        count = jobs_fail_stale()
        if count:
            logger.warning("marked %d stale training job(s) failed", count)
    except Exception:
        logger.exception("stale-job sweep failed")
