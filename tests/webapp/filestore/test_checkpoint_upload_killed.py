"""Done-when of issue 36: a training worker killed (SIGKILL) during its checkpoint upload leaves no model row
pointing at a partial checkpoint, and the retried job finishes, on another "machine" (its own data folder
and cache), from the object store alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from django.core.files.storage import default_storage

from common.filestore.publish import folder_manifest
from common.jobs.services import jobs_recover_stale
from tests.training.conftest import seed_episodes
from training.models import TrainedModel, TrainingJob
from training.resnet.checkpoint import load_checkpoint
from training.services import TRAINING_JOBS, job_create, job_execute
from training.snapshots.services import snapshot_create
from training.storage import local_path

pytestmark = pytest.mark.slow

# the worker: its uploads of checkpoint files are slow, so the test can kill it with one file stored
WORKER = """
import os, sys, time
import django
django.setup()
from pathlib import Path
from common.filestore import store
real = store.uploads
def slow(storage, pairs):
    real(storage, pairs[:1])
    if pairs and pairs[0][1].startswith("checkpoints/"):
        Path(os.environ["MARKER"]).touch()
        time.sleep(60)
    real(storage, pairs[1:])
store.uploads = slow
from training.services import job_execute
job_execute(job_id=int(sys.argv[1]), worker="doomed")
"""


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_upload_leaves_no_model_and_the_retry_finishes(
    project, process_env, s3_storage, settings, tmp_path
):
    settings.CELERY_QUEUE_TRAINING = "checkpoint-upload-kill-test"  # no worker takes the requeued message
    settings.TRAINING_STALE_AFTER_SECONDS = 1
    seed_episodes(project, episodes=4, steps=6, size=16, windows=False)  # frames on the object store
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "trend": False})
    assert snapshot.status == "ready", snapshot.error
    assert folder_manifest(default_storage, snapshot.folder) is not None  # the snapshot itself was published
    config = {"hidden_dim": 8, "image_size": [3, 16, 16], "epochs": 1, "batch_size": 16, "warmup_steps": 0}
    job = job_create(project=project, snapshot=snapshot, config=config | {"num_threads": 1, "patience": 0})

    marker, machine = tmp_path / "uploading", tmp_path / "training-machine"
    env = {**process_env, **s3_storage, "MARKER": str(marker), "TRAINING_HEARTBEAT_SECONDS": "1"}
    env.update(RS_DATA_DIR=str(machine), MEDIA_ROOT=str(machine / "media"), STORAGE_CACHE_DIR=str(machine / "cache"))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WORKER), str(job.pk)], env=env)
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert proc.poll() is None, "the worker ended before uploading its checkpoint"
            assert time.monotonic() < deadline, "the worker never started its checkpoint upload"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)

    assert TrainingJob.objects.get(pk=job.pk).status == "running"
    assert not TrainedModel.objects.filter(job=job).exists()
    assert folder_manifest(default_storage, job.checkpoint_folder) is None  # files, but never complete
    assert folder_manifest(default_storage, f"{job.checkpoint_folder}/best") is None
    assert not (machine / "media").exists()  # the worker wrote nothing to a media folder of its own

    deadline = time.monotonic() + 30
    while not jobs_recover_stale(TRAINING_JOBS).requeued:
        assert time.monotonic() < deadline, "the killed job was never requeued"
        time.sleep(0.5)
    # the retry runs here: another machine (this process's own cache), nothing from the first but the store
    assert job_execute(job_id=job.pk, worker="fresh") == "succeeded", TrainingJob.objects.get(pk=job.pk).error
    model = TrainedModel.objects.get(job=job)
    assert folder_manifest(default_storage, model.checkpoint_path) is not None
    folder = local_path(model.checkpoint_path)
    assert str(folder).startswith(str(settings.STORAGE_CACHE_DIR))
    loaded, _ = load_checkpoint(folder)
    assert loaded(torch.zeros(2, 16, 16, 3, dtype=torch.uint8)).shape == (2,)
