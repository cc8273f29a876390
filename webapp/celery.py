"""The Celery app. Queues (ingest, training, inference, default) and each task's route are named in
settings (CELERY_TASK_ROUTES); the periodic schedule that `celery beat` sends lives here."""

from __future__ import annotations

import functools
import logging
import os
from typing import TYPE_CHECKING

from celery import Celery, bootsteps
from celery.signals import before_task_publish, task_postrun, worker_init, worker_process_init

from common.memory import allocator_setup, malloc_trim
from webapp.monitoring.heartbeats import BEAT_TASK, beat_stamp, heartbeat_ttl, queues_stamp

if TYPE_CHECKING:
    from common.jobs.services import JobKind

logger = logging.getLogger(__name__)
SWEEP_TASK = "webapp.sweep_stale_jobs"

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


@worker_init.connect(weak=False)
@worker_process_init.connect(weak=False)
def _memory_goes_back(**_kwargs) -> None:
    """Workers decode images and run models: freed buffers of MALLOC_MMAP_THRESHOLD_BYTES or more go back to
    the OS (common.memory; the prefork children inherit it, the solo pool runs in the worker itself)."""
    from django.conf import settings

    allocator_setup(settings.MALLOC_MMAP_THRESHOLD_BYTES)


@worker_init.connect(weak=False)
def _startup_checks(**_kwargs) -> None:
    """A worker that cannot reach the stored files stops at once, saying what it lacks in one line each."""
    from common.filestore.checks import storage_problems

    problems = storage_problems()
    if problems:  # SystemExit: Celery logs and ignores a handler's other exceptions
        raise SystemExit("start-up check failed: " + "; ".join(problems))


@task_postrun.connect(weak=False)
def _trim_after_task(**_kwargs) -> None:
    """What a task freed and the C heap still holds goes back to the OS before the next task."""
    malloc_trim()


def job_kinds() -> tuple[JobKind, ...]:
    """Every kind of background job (`common.jobs.services.JobKind`), imported when first swept."""
    from labeling.imports.jobs import IMPORT_JOBS
    from labeling.proposals.jobs import PROPOSAL_JOBS
    from training.services import TRAINING_JOBS
    from training.snapshots.recovery import SNAPSHOT_BUILDS

    return (TRAINING_JOBS, SNAPSHOT_BUILDS, IMPORT_JOBS, PROPOSAL_JOBS)


@app.task(name=SWEEP_TASK)
def sweep_stale_jobs() -> dict[str, dict[str, list[int]]]:
    """Sent by beat every TRAINING_SWEEP_SECONDS (default queue): in every kind of job, one whose worker is gone
    is requeued, or failed once it lost its last attempt, and lost or untaken queued jobs are seen to."""
    from common.jobs.services import jobs_recover_stale

    return {kind.name: jobs_recover_stale(kind).as_dict() for kind in job_kinds()}


def beat_schedule() -> dict:
    """Periodic tasks. The sweeps go to the default queue, where a running job cannot hold them up: one sweep
    over every kind of job (training jobs, snapshot builds, imports, proposal generations) requeues a job whose
    worker died, or fails it once out of attempts; frame files no row names are removed."""
    from django.conf import settings

    sweep = float(settings.TRAINING_SWEEP_SECONDS)
    return {
        "sweep-stale-jobs": {"task": SWEEP_TASK, "schedule": sweep},
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
