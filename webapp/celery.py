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
    """Periodic tasks. The stale-job sweep goes to the default queue, where a running job cannot hold it up."""
    from django.conf import settings

    return {
        "training-recover-stale-jobs": {
            "task": "training.tasks.recover_stale_jobs",
            "schedule": float(settings.TRAINING_SWEEP_SECONDS),
        },
        # train-to-target loops: projects with enough new labels get a fresh snapshot and a job
        "training-retrain-sweep": {"task": "training.tasks.retrain_sweep", "schedule": 30.0},
    }


app.conf.beat_schedule = beat_schedule()
