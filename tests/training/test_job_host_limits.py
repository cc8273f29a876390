"""Job settings within the training host: `num_threads` at most its cores (TRAINING_HOST_CPUS) and the first
batch within TRAINING_MAX_BATCH_BYTES, refused at submission with the reason (API, page, job_create); a job's
torch threads never reach the next job run by the same worker process."""

from __future__ import annotations

import pytest

from training.models import TrainingJob
from training.services import job_create

from .test_distributed_training import small_snapshot
from .test_job_limits import _post_job
from .test_training_job import SMALL, wait_for

FORM = {"kind": "resnet", "arch": "resnet18", "hidden_dim": 16, "dropout": 0.1, "image_height": 32,
        "image_width": 32, "lr": 1e-3, "weight_decay": 0, "grad_clip": 1, "warmup_steps": 0, "batch_size": 8,
        "epochs": 1, "crop_padding": 4, "patience": 0, "min_delta": 0.001, "seed": 1, "device": "cpu",
        "num_threads": 1}  # fmt: skip


@pytest.fixture
def snapshot(project):
    return small_snapshot(project, episodes=3, steps=6)


@pytest.mark.django_db
def test_more_threads_than_the_training_hosts_cores_are_refused_with_the_reason(user_client, snapshot, settings):
    settings.TRAINING_HOST_CPUS = 2
    refused = _post_job(user_client, snapshot, {**SMALL, "num_threads": 512})
    assert refused.status_code == 400
    detail = refused.json()["detail"]
    assert "num_threads 512 is more than the training host's 2 CPU cores (TRAINING_HOST_CPUS)" in detail, detail
    page = user_client.post(
        f"/projects/{snapshot.project_id}/training/jobs/new", {**FORM, "snapshot": snapshot.pk, "num_threads": 512}
    )
    assert page.status_code == 400 and b"num_threads 512 is more than the training host&#x27;s 2 CPU" in page.content
    with pytest.raises(ValueError, match="TRAINING_HOST_CPUS"):
        job_create(project=snapshot.project, snapshot=snapshot, config={**SMALL, "num_threads": 3})
    assert not TrainingJob.objects.exists()
    assert _post_job(user_client, snapshot, {**SMALL, "num_threads": 2}).status_code == 201


@pytest.mark.django_db
def test_a_first_batch_over_the_memory_limit_is_refused_with_the_reason(user_client, snapshot, settings):
    assert settings.TRAINING_MAX_BATCH_BYTES == 4 * 1024**3  # the default
    ten_gb = {**SMALL, "batch_size": 800, "image_size": [3, 1024, 1024]}  # 800 x 3 x 1024^2 x 4 B = 10.1 GB
    refused = _post_job(user_client, snapshot, ten_gb)
    assert refused.status_code == 400
    detail = refused.json()["detail"]
    assert "batch_size 800 x image_size [3, 1024, 1024] needs at least 9.4 GiB" in detail, detail
    assert "the limit is 4.0 GiB (TRAINING_MAX_BATCH_BYTES)" in detail
    audit = _post_job(user_client, snapshot, {**SMALL, "batch_size": 4096, "image_size": [3, 1024, 1024]})
    assert audit.status_code == 400 and "TRAINING_MAX_BATCH_BYTES" in audit.json()["detail"]
    page = user_client.post(
        f"/projects/{snapshot.project_id}/training/jobs/new",
        {**FORM, "snapshot": snapshot.pk, "batch_size": 800, "image_height": 1024, "image_width": 1024},
    )
    assert page.status_code == 400 and b"TRAINING_MAX_BATCH_BYTES" in page.content
    assert not TrainingJob.objects.exists()
    settings.TRAINING_MAX_BATCH_BYTES = 16 * 1024**3  # an admin with a bigger machine allows it
    assert _post_job(user_client, snapshot, ten_gb).status_code == 201


def _threads(job: TrainingJob) -> int:
    lines = [line for line in job.log.splitlines() if "torch threads: " in line]
    assert len(lines) == 1, job.log
    return int(lines[0].rsplit("torch threads: ", 1)[1])


@pytest.mark.django_db(transaction=True)
def test_a_jobs_threads_do_not_reach_the_next_job_of_the_same_worker(project, snapshot, celery_worker_process):
    quick = {**SMALL, "epochs": 1, "num_threads": 0}
    first = wait_for(job_create(project=project, snapshot=snapshot, config=quick), {"succeeded", "failed"})
    assert first.status == "succeeded", first.error
    default = _threads(first)  # the worker process's own value
    asked = 1 if default != 1 else 2
    other = wait_for(
        job_create(project=project, snapshot=snapshot, config={**quick, "num_threads": asked}), {"succeeded", "failed"}
    )
    assert other.status == "succeeded" and _threads(other) == asked, other.error
    after = wait_for(job_create(project=project, snapshot=snapshot, config=quick), {"succeeded", "failed"})
    assert after.status == "succeeded", after.error
    assert _threads(after) == default  # not `asked`: the worker put its own value back after the job
