"""The Celery app. Queues (ingest, training, inference, default) and each task's route are named in
settings (CELERY_TASK_ROUTES); the periodic schedule that `celery beat` sends lives here."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def beat_schedule() -> dict:
    """Periodic tasks. The stale-work sweeps go to the default queue, where a running job cannot hold them up:
    training jobs and snapshot builds whose worker died are requeued (or failed), import and proposal jobs
    whose worker is gone are failed."""
    from django.conf import settings

    sweep = float(settings.TRAINING_SWEEP_SECONDS)
    return {
        "training-recover-stale-jobs": {"task": "training.tasks.recover_stale_jobs", "schedule": sweep},
        "training-recover-stale-snapshots": {"task": "training.tasks.recover_stale_snapshots", "schedule": sweep},
        "labeling-fail-stale-jobs": {"task": "labeling.tasks.fail_stale_jobs", "schedule": sweep},
        # train-to-target loops: projects with enough new labels get a fresh snapshot and a job
        "training-retrain-sweep": {"task": "training.tasks.retrain_sweep", "schedule": 30.0},
    }


app.conf.beat_schedule = beat_schedule()
