"""Celery by purpose: every registered task has an explicit route to the queue pinned here, and beat's
schedule (defined in webapp/celery.py) sends the stale-job sweep to the default queue, not behind a job.
A new task fails this test until it gets a route in settings.CELERY_TASK_ROUTES and a row below."""

from __future__ import annotations

from django.conf import settings

from webapp.celery import app

EXPECTED = {
    "labeling.tasks.generate_episode_proposals": "ingest",
    "training.tasks.run_training_job": "training",
    "training.tasks.build_snapshot": "default",
    "webapp.sweep_stale_jobs": "default",
    "labeling.tasks.sweep_orphan_frames": "default",
    "labeling.tasks.run_import_job": "ingest",
    "labeling.tasks.generate_project_proposals": "ingest",
    "labeling.tasks.run_lerobot_export": "ingest",
    "webhooks.tasks.deliver_webhook": "default",
    "training.tasks.recompute_label_queue": "default",
    "training.tasks.after_training_job": "default",
    "training.tasks.compute_evaluation": "default",
    "training.tasks.retrain_sweep": "default",
    "webapp.heartbeat": "default",
}


def _queue_of(name: str) -> str:
    return app.amqp.router.route({}, name)["queue"].name


def test_every_registered_task_is_routed_to_its_pinned_queue():
    app.loader.import_default_modules()
    ours = sorted(name for name in app.tasks if not name.startswith("celery."))
    assert ours == sorted(EXPECTED), "a task was added or removed: route it in settings and pin it here"
    assert set(settings.CELERY_TASK_ROUTES) == set(EXPECTED), "routes by name only, no globs"
    assert {name: _queue_of(name) for name in ours} == EXPECTED


SWEEPS = {"sweep-stale-jobs"}


def test_beat_sends_the_sweeps_to_the_default_queue():
    app.loader.import_default_modules()
    schedule = app.conf.beat_schedule
    assert set(schedule) == SWEEPS | {"training-retrain-sweep", "beat-heartbeat", "labeling-sweep-orphan-frames"}
    for name in SWEEPS:
        entry = schedule[name]
        assert entry["task"] in app.tasks
        assert _queue_of(entry["task"]) == settings.CELERY_QUEUE_DEFAULT
        assert entry["schedule"] == float(settings.TRAINING_SWEEP_SECONDS)
    orphans = schedule["labeling-sweep-orphan-frames"]
    assert _queue_of(orphans["task"]) == settings.CELERY_QUEUE_DEFAULT
    assert orphans["schedule"] == float(settings.ORPHAN_FRAMES_SWEEP_SECONDS)


def test_training_jobs_are_acknowledged_late_one_at_a_time():
    app.loader.import_default_modules()
    assert app.tasks["training.tasks.run_training_job"].acks_late is True
    assert app.conf.worker_prefetch_multiplier == 1
