"""Jobs survive their workers (no worker process here): the sweep requeues a job whose heartbeat went
silent, gives up after TRAINING_MAX_ATTEMPTS, re-sends a queued job whose message is gone, and a ResNet
run stopped between steps resumes from its checkpoint to the very weights of an uninterrupted run."""

from __future__ import annotations

import socket
from datetime import timedelta
from unittest import mock

import pytest
import torch
from django.utils import timezone

from common.jobs.broker_messages import waiting_task_ids
from common.jobs.services import jobs_recover_stale
from training.kit.reporting import JobCancelled, MemoryReporter
from training.kit.resume import state_path
from training.models import TrainingJob
from training.resnet.checkpoint import load_checkpoint
from training.resnet.config import ResNetConfig
from training.resnet.train import train_reward_model
from training.services import TRAINING_JOBS

from .test_pages_and_api import TINY, snapshot  # noqa: F401 - fixture


def _running(job, *, age_seconds: float, attempt: int = 1, worker: str = "box:1"):
    TrainingJob.objects.filter(pk=job.pk).update(
        status="running", heartbeat_at=timezone.now() - timedelta(seconds=age_seconds), attempt=attempt, worker=worker
    )


@pytest.mark.django_db(transaction=True)
def test_sweep_requeues_silent_jobs_and_fails_them_after_the_last_attempt(snapshot, settings):  # noqa: F811
    from training.services import job_create

    settings.TRAINING_STALE_AFTER_SECONDS = 60
    settings.TRAINING_MAX_ATTEMPTS = 2
    settings.CELERY_QUEUE_TRAINING = "training-recovery-test"
    silent, exhausted, alive = (
        job_create(project=snapshot.project, snapshot=snapshot, config=TINY, enqueue=False) for _ in range(3)
    )
    _running(silent, age_seconds=600, attempt=1)
    _running(exhausted, age_seconds=600, attempt=2)
    # a fresh heartbeat counts as alive, whatever the host and pid say (containers share host names)
    _running(alive, age_seconds=1, worker=f"{socket.gethostname()}:999999999")

    outcome = jobs_recover_stale(TRAINING_JOBS)

    assert outcome.requeued == [silent.pk] and outcome.failed == [exhausted.pk]
    rows = {j.pk: j for j in TrainingJob.objects.all()}
    assert rows[silent.pk].status == "queued" and "requeued (attempt 1 of 2 lost)" in rows[silent.pk].log
    assert rows[silent.pk].celery_task_id and rows[silent.pk].enqueued_at is not None
    assert rows[exhausted.pk].status == "failed"
    assert "gave up after 2 of 2 attempts" in rows[exhausted.pk].error
    assert rows[alive.pk].status == "running"
    waiting = waiting_task_ids(settings.CELERY_BROKER_URL, settings.CELERY_QUEUE_TRAINING)
    assert rows[silent.pk].celery_task_id in waiting

    TrainingJob.objects.filter(pk=alive.pk).update(status="succeeded")  # out of the way of the clock jump below
    # the message is in the broker: a second sweep sends nothing more, even once it is old
    later = timezone.now() + timedelta(seconds=120)
    assert jobs_recover_stale(TRAINING_JOBS, now=later).resent == []
    _drain(settings)
    with mock.patch("common.jobs.lost_messages.broker_task_ids", return_value=None):
        assert (
            jobs_recover_stale(TRAINING_JOBS, now=later).resent == []
        )  # an unreadable broker: nothing sent on a guess
    # the message got lost (e.g. Redis restarted without persistence): the sweep sends it again
    assert jobs_recover_stale(TRAINING_JOBS, now=later).resent == [silent.pk]
    resent = TrainingJob.objects.get(pk=silent.pk).celery_task_id
    assert resent != rows[silent.pk].celery_task_id
    assert resent in waiting_task_ids(settings.CELERY_BROKER_URL, settings.CELERY_QUEUE_TRAINING)
    _drain(settings)


def _drain(settings) -> None:
    import redis

    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(settings.CELERY_QUEUE_TRAINING)


def _data(n: int = 12, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 255, (n, 16, 16, 3), dtype=torch.uint8, generator=generator)
    labels = [i % 2 for i in range(n)]
    return images, labels


def test_a_resnet_run_stopped_midway_resumes_to_the_same_weights(tmp_path):
    config = ResNetConfig.from_dict(
        {"hidden_dim": 8, "image_size": [3, 16, 16], "epochs": 2, "batch_size": 4, "warmup_steps": 2}
        | {"num_threads": 1, "patience": 0, "seed": 5}
    )
    images, labels = _data()
    straight = train_reward_model(config, images, labels, images[:4], labels[:4], out_dir=tmp_path / "a")

    stopped = tmp_path / "b"
    with pytest.raises(JobCancelled):  # stands for the killed worker: stops between two steps of epoch 2
        train_reward_model(
            config,
            images,
            labels,
            images[:4],
            labels[:4],
            out_dir=stopped,
            reporter=MemoryReporter(cancel_after_steps=4),
            checkpoint_seconds=1e-9,  # a resume state after every step
        )
    assert state_path(stopped).exists()
    reporter = MemoryReporter()
    resumed = train_reward_model(
        config, images, labels, images[:4], labels[:4], out_dir=stopped, reporter=reporter, resume=True
    )
    assert reporter.resumed_at == 4 and reporter.steps[0]["step"] == 5  # not from scratch
    assert [p["epoch"] for p in reporter.epochs] == [2]
    assert resumed.steps == straight.steps == 6 and resumed.best_epoch == straight.best_epoch
    a, _ = load_checkpoint(straight.last_folder)
    b, _ = load_checkpoint(resumed.last_folder)
    for key, value in a.state_dict().items():
        assert torch.allclose(value.float(), b.state_dict()[key].float(), atol=1e-5), key
    assert resumed.best_metrics["val_loss"] == pytest.approx(straight.best_metrics["val_loss"], abs=1e-5)
