"""The Celery app. Queues (ingest, training, inference, default) and each task's route are named in
settings (CELERY_TASK_ROUTES); the periodic schedule that `celery beat` sends lives here."""

from __future__ import annotations

import functools
import logging
import os

from celery import Celery, bootsteps
from celery.signals import before_task_publish

from webapp.monitoring.heartbeats import BEAT_TASK, beat_stamp, heartbeat_ttl, queues_stamp

logger = logging.getLogger(__name__)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@functools.cache
def _heartbeat_redis():
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


class QueueHeartbeat(bootsteps.StartStopStep):
    """Each worker stamps the queues it consumes every HEARTBEAT_SECONDS from its own event loop, so a worker
    that died or hangs reads as down on /healthz (webapp.monitoring.heartbeats)."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.tref = None

    def start(self, parent):
        from django.conf import settings

        interval = float(settings.HEARTBEAT_SECONDS)
        queues = sorted(parent.app.amqp.queues.consume_from)
        client = _heartbeat_redis()

        def stamp():
            try:
                queues_stamp(client, queues, heartbeat_ttl(interval))
            except Exception as exc:  # Redis away: the key expires and /healthz says so
                logger.warning("heartbeat not written: %s", exc)

        stamp()
        self.tref = parent.timer.call_repeatedly(interval, stamp)

    def stop(self, parent):
        if self.tref is not None:
            parent.timer.cancel(self.tref)
            self.tref = None


app.steps["consumer"].add(QueueHeartbeat)


@app.task(name=BEAT_TASK, ignore_result=True)
def heartbeat() -> None:
    """Sent by beat every HEARTBEAT_SECONDS; sending it is the heartbeat."""


@before_task_publish.connect(sender=BEAT_TASK, weak=False)
def _beat_sends_heartbeat(**_kwargs) -> None:
    from django.conf import settings

    try:
        beat_stamp(_heartbeat_redis(), heartbeat_ttl(float(settings.HEARTBEAT_SECONDS)))
    except Exception as exc:
        logger.warning("beat heartbeat not written: %s", exc)


def beat_schedule() -> dict:
    """Periodic tasks. The stale-work sweeps go to the default queue, where a running job cannot hold them up:
    training jobs and snapshot builds whose worker died are requeued (or failed), import and proposal jobs
    whose worker is gone are failed, frame files no row names are removed."""
    from django.conf import settings

    sweep = float(settings.TRAINING_SWEEP_SECONDS)
    return {
        "training-recover-stale-jobs": {"task": "training.tasks.recover_stale_jobs", "schedule": sweep},
        "training-recover-stale-snapshots": {"task": "training.tasks.recover_stale_snapshots", "schedule": sweep},
        "labeling-fail-stale-jobs": {"task": "labeling.tasks.fail_stale_jobs", "schedule": sweep},
        # frame files of a web process killed mid-write, never referenced by a row
        "labeling-sweep-orphan-frames": {
            "task": "labeling.tasks.sweep_orphan_frames",
            "schedule": float(settings.ORPHAN_FRAMES_SWEEP_SECONDS),
        },
        # train-to-target loops: projects with enough new labels get a fresh snapshot and a job
        "training-retrain-sweep": {"task": "training.tasks.retrain_sweep", "schedule": 30.0},
        # beat stamps its heartbeat when it sends this (webapp.monitoring.heartbeats); the worker that gets it does nothing
        "beat-heartbeat": {
            "task": BEAT_TASK,
            "schedule": float(settings.HEARTBEAT_SECONDS),
            "options": {"expires": float(settings.HEARTBEAT_SECONDS)},
        },
    }


app.conf.beat_schedule = beat_schedule()
