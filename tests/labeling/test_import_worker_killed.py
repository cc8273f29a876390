"""Done-when of "nothing lost to a fault", Celery worker: a real worker is killed (`kill -9`) in the middle of a
folder import; the job is left running with a heartbeat that stops. The sweep (beat's `webapp.sweep_stale_jobs`)
requeues it once its heartbeat is older than JOBS_STALE_AFTER_SECONDS, a fresh worker imports it again, and
the import succeeds exactly once: every labelled folder is one episode, none twice, none half-stored, and
every frame file on disk belongs to a stored frame."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.files.storage import default_storage

from labeling.models import Episode, Frame, ImportJob, Step
from labeling.tasks import run_import_job
from tests.conftest import _spawn, _stop
from tests.waiting import wait_until
from webapp.celery import sweep_stale_jobs

from .import_builders import image, png_bytes

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUEUE = "ingest-kill-test"  # a queue of its own: the session's worker (every queue) never takes this import
SOURCES = 12  # folders, each with success/ and failure/: 24 episodes, imported one folder at a time
PER_LABEL = 30
SIZE = 64


def _worker(process_env, name: str) -> subprocess.Popen:
    env = {**process_env, "JOBS_HEARTBEAT_SECONDS": "1"}
    args = [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", QUEUE]
    args += ["--pool", "solo", "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--loglevel", "INFO"]
    return _spawn(args, env, f"celery-import-{name}.log")


def _upload() -> Path:
    """An upload as import_job_create stores it: IMPORT_DIR/<job>/0/<folder>/{success,failure}/*.png."""
    root = Path(django_settings.IMPORT_DIR) / uuid.uuid4().hex / "0"
    for source in range(SOURCES):
        for label, base in (("success", 0), ("failure", 5000)):
            folder = root / f"set_{source:02d}" / label
            folder.mkdir(parents=True)
            for i in range(PER_LABEL):
                seed = base + source * 100 + i
                (folder / f"frame_{i}.png").write_bytes(png_bytes(image(seed, SIZE)))
    return root.parent


def _files_on_disk(project) -> int:
    folder = Path(default_storage.path(f"frames/{project.pk}"))
    return sum(1 for path in folder.rglob("*") if path.is_file()) if folder.exists() else 0


def test_an_import_whose_worker_was_killed_finishes_exactly_once(project, process_env, settings, monkeypatch):
    settings.JOBS_STALE_AFTER_SECONDS = 3
    # this test's sends (its own and the sweep's requeue) go to the test's queue
    monkeypatch.setattr(run_import_job, "delay", lambda *args: run_import_job.apply_async(args, queue=QUEUE))
    job = ImportJob.objects.create(project=project, folder=str(_upload()))
    first = _worker(process_env, "doomed")
    second = None
    try:
        run_import_job.delay(job.pk)
        # killed with some folders imported and others not yet (progress counts folders done)
        wait_until(lambda: ImportJob.objects.get(pk=job.pk).done >= 2, 90, "the first folders to be imported", 0.1)
        os.kill(first.pid, signal.SIGKILL)  # no clean-up of any kind
        first.wait(timeout=10)
        killed = ImportJob.objects.get(pk=job.pk)
        assert killed.status == "running" and 2 <= killed.done < SOURCES, (killed.status, killed.done)
        assert not sweep_stale_jobs()["imports"]["requeued"]  # its heartbeat is still fresh

        second = _worker(process_env, "fresh")
        requeued = wait_until(
            lambda: sweep_stale_jobs()["imports"]["requeued"], 20, "the sweep to requeue the import", 0.1
        )
        assert requeued == [job.pk]
        wait_until(lambda: ImportJob.objects.get(pk=job.pk).finished, 120, "the requeued import to finish", 0.1)
    finally:
        if first.poll() is None:
            _stop(first)
        if second is not None:
            _stop(second)

    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    assert job.attempt == 2 and job.done == job.total == SOURCES
    already = [name for name, _ in job.summary["already_imported"]]
    assert job.summary["episodes"] + len(already) == 2 * SOURCES
    assert len(already) >= 2 * killed.done - 1  # what the first run stored was skipped, not imported again
    assert not job.summary["failed"]

    episodes = Episode.objects.filter(project=project)
    assert episodes.count() == 2 * SOURCES and episodes.filter(status="finished").count() == 2 * SOURCES
    assert len(set(episodes.values_list("metadata__folder", flat=True))) == 2 * SOURCES
    assert Step.objects.filter(episode__project=project).count() == 2 * SOURCES * PER_LABEL
    frames = Frame.objects.filter(step__episode__project=project).count()
    assert frames == 2 * SOURCES * PER_LABEL == _files_on_disk(project)
    assert not Path(killed.folder).exists()  # the upload is removed once imported
