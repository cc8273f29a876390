"""ResNet training jobs through a real Celery worker on Redis: they train, report, checkpoint, cancel."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torchvision
from safetensors.torch import load_file

from training.datasets.rlinf_binary import read_payload
from training.models import JobMetric, TrainedModel, TrainingJob
from training.resnet.checkpoint import load_checkpoint
from training.resnet.config import ResNetConfig
from training.resnet.model import RewardResNet, predict_proba
from training.resnet.train import stack_images
from training.services import job_cancel, job_create
from training.snapshots.services import snapshot_create
from training.storage import local_path

from .conftest import seed_episodes

SMALL = {
    "hidden_dim": 32,
    "image_size": [3, 32, 32],
    "lr": 3e-4,
    "warmup_steps": 0,
    "batch_size": 8,
    "epochs": 3,
    "patience": 0,
    "seed": 0,
    "num_threads": 1,
    "pretrained": False,
}


def wait_for(job: TrainingJob, statuses: set[str], timeout: float = 120.0) -> TrainingJob:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.status in statuses:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job stayed {job.status}; log:\n{job.log}\n{job.error}")


@pytest.mark.django_db(transaction=True)
def test_celery_worker_trains_a_separable_resnet_to_95_percent(project, user, celery_worker_process):
    seed_episodes(project, episodes=15, steps=16, windows=False)
    snapshot = snapshot_create(
        project=project,
        options={"val_split": 0.34, "fail_success_ratio": 1.0, "seed": 0, "trend": False, "png_folders": False},
    )
    assert snapshot.status == "ready", snapshot.error
    assert snapshot.stats["val"]["total"] == 48 and snapshot.stats["train"]["total"] == 112
    job = job_create(project=project, snapshot=snapshot, config=SMALL, created_by=user)
    job = wait_for(job, {"succeeded", "failed", "cancelled"})
    assert job.status == "succeeded", job.error
    assert job.summary["val_acc"] >= 0.95, job.log
    assert job.progress == 1.0 and job.started_at and job.finished_at
    assert JobMetric.objects.filter(job=job, kind="epoch").count() == 3
    steps = JobMetric.objects.filter(job=job, kind="step").order_by("step")
    assert steps.count() == job.summary["steps"] and {"train_loss", "train_acc"} <= set(steps[0].values)

    model_row = TrainedModel.objects.get(job=job)
    folder = local_path(model_row.checkpoint_path)
    val = read_payload(local_path(snapshot.folder) / "val.pt")
    images = stack_images(val["images"], [3, 32, 32]).numpy()
    model, config = load_checkpoint(folder)
    probs = predict_proba(model, images)
    fresh = RewardResNet(ResNetConfig.from_dict(model_row.config)).eval()
    state = load_file(str(folder / "model.safetensors"))
    fresh.load_state_dict(state, strict=True)
    np.testing.assert_array_equal(predict_proba(fresh, images), probs)
    assert ((probs > 0.5) == np.asarray(val["labels"], dtype=bool)).mean() >= 0.95
    reference = {f"backbone.{k}" for k in torchvision.models.resnet18().state_dict() if not k.startswith("fc.")}
    assert set(state) == reference | {f"backbone.fc.{i}.{p}" for i in (0, 3) for p in ("weight", "bias")}
    assert all(v.dtype != torch.uint8 or "num_batches" in k for k, v in state.items())
    assert (local_path(job.checkpoint_folder) / "last" / "model.safetensors").exists()
    # the job fitted the model's OOD statistics beside it: blank, constant and noise frames are flagged, few of
    # the validation frames are (the evaluation page's off-distribution panel)
    panel = model_row.ood_panel
    assert panel is not None and (folder / "ood.safetensors").exists(), job.log
    assert panel["val_flagged"] <= 0.05 and "of validation frames above it" in job.log
    # calibrated on the training episodes cross-fitted (the snapshot's train_index.json), not validation alone
    assert "(calibrated on episodes cross-fitted: " in job.log, job.log
    flagged = {row["probe"]: row["flagged"] for row in panel["probes"]}
    assert flagged["black"] == flagged["white"] == flagged["constant grey"] == flagged["uniform noise"] == 1.0


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_a_running_job_between_batches(project, celery_worker_process):
    seed_episodes(project, episodes=3, steps=6, windows=False)
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "trend": False, "png_folders": False})
    job = job_create(project=project, snapshot=snapshot, config={**SMALL, "epochs": 200, "batch_size": 2})
    wait_for(job, {"running"}, timeout=60)
    deadline = time.monotonic() + 60
    while not JobMetric.objects.filter(job=job).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    job_cancel(job=job)
    job = wait_for(job, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert job.status == "cancelled", job.error
    assert not TrainedModel.objects.filter(job=job).exists()
    assert "cancelled" in job.log
