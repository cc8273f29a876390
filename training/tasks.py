"""Celery tasks of the training app: thin wrappers over services. Routes (which queue) are in settings."""

from __future__ import annotations

import logging
import os
import socket

from celery import shared_task
from celery.signals import worker_ready

logger = logging.getLogger(__name__)


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# acks_late with a prefetch of 1: a busy training worker holds no waiting job's message, so another worker
# can take it; the job row (not the message) says whether a job still has to run (job_execute is idempotent).
@shared_task(name="training.tasks.run_training_job", acks_late=True)
def run_training_job(job_id: int) -> str:
    from common.jobs.models import JobStatus

    from .services import job_execute

    status = job_execute(job_id=job_id, worker=_worker_name())
    if status == JobStatus.SUCCEEDED:  # a new model: re-rank the labeling queue, maybe redeploy
        after_training_job.delay(job_id)
    return status


@shared_task(name="training.tasks.build_snapshot")
def build_snapshot(snapshot_id: int) -> str:
    from .snapshots.services import snapshot_build

    return snapshot_build(snapshot_id=snapshot_id)


@shared_task(name="training.tasks.recompute_label_queue")
def recompute_label_queue(project_id: int) -> dict:
    """{"ranked": frames queued, "skipped": [{"frame": storage name, "reason": why it will not decode}]}."""
    from projects.models import Project

    from .queue.services import label_queue_rank

    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return {"ranked": 0, "skipped": []}
    result = label_queue_rank(project=project)
    return {"ranked": result.ranked, "skipped": [{"frame": s.name, "reason": s.reason} for s in result.skipped]}


@shared_task(name="training.tasks.after_training_job")
def after_training_job(job_id: int) -> None:
    from .queue.retrain import after_training

    after_training(job_id=job_id)


@shared_task(name="training.tasks.compute_evaluation")
def compute_evaluation(model_id: int) -> None:
    """The evaluation page's figures for a model trained before they were computed at the job's end."""
    from common.filestore.services import stored_republish

    from .evaluation.precompute import evaluation_precompute_by_id
    from .models import TrainedModel

    evaluation_precompute_by_id(model_id=model_id)
    checkpoint = TrainedModel.objects.filter(pk=model_id).values_list("checkpoint_path", flat=True).first()
    if checkpoint:
        stored_republish(checkpoint)  # the figures, beside the checkpoint in the object store


@shared_task(name="training.tasks.retrain_sweep")
def retrain_sweep() -> int:
    from .queue.retrain import retrain_sweep as sweep

    return sweep()


@worker_ready.connect
def _sweep_on_start(sender=None, **kwargs) -> None:
    """A starting worker sweeps the training jobs at once (a restart after a crash need not wait for beat)."""
    from common.jobs.services import jobs_recover_stale

    from .services import TRAINING_JOBS

    try:
        outcome = jobs_recover_stale(TRAINING_JOBS)
        if outcome.requeued or outcome.failed or outcome.resent:
            logger.warning("stale-job sweep at start: %s", outcome.as_dict())
    except Exception:
        logger.exception("stale-job sweep failed")
