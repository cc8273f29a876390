"""Done-when of "jobs survive their workers": a real training worker is killed (`kill -9`) in the middle of
a ResNet job; the sweep requeues the job; a fresh worker resumes it from its last checkpoint (not from
scratch) and the job ends with a model that loads. Run with the default `TRAINING_CHECKPOINT_SECONDS` (300 s,
longer than the job: a security pass saw such a job start again at epoch 1, as epoch ends waited for the
clock) and with 1 s (the job longer than the interval: mid-epoch states between the epoch ends)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from common.jobs.services import jobs_recover_stale
from tests.conftest import _spawn, _stop
from training.kit.resume import state_path
from training.models import JobMetric, TrainedModel, TrainingJob
from training.resnet.checkpoint import load_checkpoint
from training.services import TRAINING_JOBS, job_create
from training.snapshots.services import snapshot_create
from training.storage import local_path

from .conftest import seed_episodes

pytestmark = pytest.mark.slow
QUEUE = "training-kill-test"  # a queue of its own: no other test's worker takes this job
EPOCHS = 6


def _worker(process_env, name: str, checkpoint_seconds: str) -> subprocess.Popen:
    env = {
        **process_env,
        "TRAINING_HEARTBEAT_SECONDS": "1",
        "TRAINING_CHECKPOINT_SECONDS": checkpoint_seconds,
        # the test sends its job to a queue of its own: the workers' start-up sweep must leave it alone
        "TRAINING_STALE_AFTER_SECONDS": "600",
    }
    args = [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", QUEUE, "--pool", "solo"]
    args += ["-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--loglevel", "INFO"]
    return _spawn(args, env, f"celery-{name}.log")


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.mark.parametrize("checkpoint_seconds", ["300", "1"], ids=["interval_past_the_job", "job_past_the_interval"])
@pytest.mark.django_db(transaction=True)
def test_a_killed_training_worker_resumes_on_a_fresh_one(project, process_env, settings, checkpoint_seconds):
    settings.CELERY_QUEUE_TRAINING = QUEUE
    settings.TRAINING_STALE_AFTER_SECONDS = 3
    seed_episodes(project, episodes=6, steps=8, size=16, windows=False)
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "trend": False})
    config = {"hidden_dim": 8, "image_size": [3, 16, 16], "epochs": EPOCHS, "batch_size": 16, "warmup_steps": 0}
    job = job_create(project=project, snapshot=snapshot, config=config | {"num_threads": 1, "patience": 0})
    state_file = state_path(local_path(job.checkpoint_folder))

    first = _worker(process_env, "doomed", checkpoint_seconds)
    second = None
    try:
        _wait(lambda: TrainingJob.objects.get(pk=job.pk).status == "running", 90, "the first worker to start the job")
        # the fresh worker boots meanwhile; the queue is empty (the running job's message is not acknowledged
        # until it ends, and a worker prefetches one message), so it waits for the requeued job
        second = _worker(process_env, "fresh", checkpoint_seconds)
        # epoch 2 reported: epoch 1's end was saved before it (the state is written after each epoch's report)
        _wait(lambda: JobMetric.objects.filter(job=job, kind="epoch", epoch__gte=2).exists(), 90, "epoch 2 to end")
        os.kill(first.pid, signal.SIGKILL)  # no clean-up of any kind
        first.wait(timeout=10)
    except BaseException:
        if second is not None:
            _stop(second)
        raise
    finally:
        if first.poll() is None:
            _stop(first)
    saved = torch.load(state_file, map_location="cpu", weights_only=True)
    assert 1 <= saved["epoch"] < EPOCHS, "the job should be killed midway, after epoch 1 was saved"
    assert TrainingJob.objects.get(pk=job.pk).status == "running"

    # the worker is gone: once its heartbeat is stale the sweep (beat's task) requeues the job
    outcome = _wait(lambda: jobs_recover_stale(TRAINING_JOBS).requeued, 20, "the job to be requeued")
    assert outcome == [job.pk]
    assert TrainingJob.objects.get(pk=job.pk).status == "queued"

    try:
        status = _wait(
            lambda: (s := TrainingJob.objects.get(pk=job.pk).status) in {"succeeded", "failed", "cancelled"} and s,
            120,
            "the resumed job to finish",
        )
    finally:
        _stop(second)
    job.refresh_from_db()
    assert status == "succeeded", job.error
    assert job.attempt == 2
    resumed_from = re.search(r"resumed from the checkpoint at epoch (\d+), step (\d+)", job.log)
    assert resumed_from, job.log
    assert int(resumed_from.group(1)) >= saved["epoch"] and int(resumed_from.group(2)) >= saved["step"]
    second_run = job.log[job.log.index("attempt 2 of") :]
    assert "epoch 1:" not in second_run  # epochs done before the kill were not trained again
    assert f"epoch {EPOCHS}:" in second_run
    epochs = list(JobMetric.objects.filter(job=job, kind="epoch").order_by("step").values_list("epoch", flat=True))
    assert epochs == list(range(1, EPOCHS + 1))  # one validation point per epoch: no duplicates from the lost run
    model = TrainedModel.objects.get(job=job)
    loaded, loaded_config = load_checkpoint(local_path(model.checkpoint_path))
    assert loaded_config.epochs == EPOCHS and model.metrics["epochs_run"] == EPOCHS
    assert loaded(torch.zeros(2, 16, 16, 3, dtype=torch.uint8)).shape == (2,)
