"""Data-parallel ResNet jobs: two gloo processes under torchrun, started by the real Celery training worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
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

from ..conftest import ROOT, free_port
from .conftest import seed_episodes
from .test_training_job import SMALL, wait_for

TWO_RANKS = {**SMALL, "processes": 2, "batch_size": 8, "epochs": 3}


@pytest.fixture(autouse=True)
def _two_processes_allowed(settings):
    """Two gloo processes per node on any host (by default a CPU host allows one: TRAINING_MAX_PROCESSES)."""
    settings.TRAINING_MAX_PROCESSES = 2


def rank_processes(job_id: int) -> dict[int, int]:
    """{rank: pid} of the job's rank processes running on this machine (read from /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
            if b"training.jobs.rank_main" not in args or str(job_id).encode() not in args:
                continue
            environ = dict(
                item.split(b"=", 1) for item in (entry / "environ").read_bytes().split(b"\0") if b"=" in item
            )
        except OSError:  # the process ended meanwhile
            continue
        if b"RANK" in environ:  # torchrun itself has the same arguments but no rank
            found[int(environ[b"RANK"])] = int(entry.name)
    return found


def wait_for_points(job: TrainingJob, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not JobMetric.objects.filter(job=job).exists():
        assert time.monotonic() < deadline, f"no metric point after {timeout}s; log:\n{job.log}"
        time.sleep(0.2)


def small_snapshot(project, *, episodes: int = 6, steps: int = 10):
    seed_episodes(project, episodes=episodes, steps=steps, windows=False)
    snapshot = snapshot_create(
        project=project,
        options={"val_split": 0.34, "fail_success_ratio": 1.0, "seed": 0, "trend": False, "png_folders": False},
    )
    assert snapshot.status == "ready", snapshot.error
    return snapshot


@pytest.mark.django_db(transaction=True)
def test_two_process_job_trains_each_rank_on_its_own_shard_and_saves_one_checkpoint(
    project, user, celery_worker_process
):
    snapshot = small_snapshot(project)
    train_total = snapshot.stats["train"]["total"]
    assert train_total % 2 == 0  # so the two shards can be disjoint and cover the set exactly
    job = job_create(project=project, snapshot=snapshot, config=TWO_RANKS, created_by=user)
    job = wait_for(job, {"succeeded", "failed", "cancelled"}, timeout=180)
    assert job.status == "succeeded", f"{job.error}\n{job.log}"

    # Both ranks trained, each on its own half of every epoch's order.
    folder = local_path(job.checkpoint_folder)
    shards = json.loads((folder / "shards.json").read_text())
    assert shards["world_size"] == 2 and [r["rank"] for r in shards["ranks"]] == [0, 1]
    first, second = (set(r["indices"]) for r in shards["ranks"])
    assert len(first) == len(second) == train_total // 2
    assert first.isdisjoint(second) and first | second == set(range(train_total))
    assert job.summary["distributed"]["world_size"] == 2 and job.summary["distributed"]["backend"] == "gloo"
    assert "2 ranks joined" in job.log and f"samples in its first pass ({train_total // 2} distinct)" in job.log
    assert job.summary["distributed"]["first_pass_samples_per_rank"] == [train_total // 2] * 2

    # Only rank 0 reported: one point per step and per epoch; the epoch loss (averaged over ranks) falls.
    steps = JobMetric.objects.filter(job=job, kind="step")
    assert sorted(steps.values_list("step", flat=True)) == list(range(1, job.summary["steps"] + 1))
    assert job.summary["steps"] == 3 * -(-train_total // 2 // 8)  # each rank's share, not the whole set
    epochs = [p.values for p in JobMetric.objects.filter(job=job, kind="epoch").order_by("step")]
    assert len(epochs) == 3 and epochs[-1]["train_loss"] < epochs[0]["train_loss"], epochs

    # Exactly one checkpoint, written by rank 0, that loads and serves like any other.
    model_row = TrainedModel.objects.get(job=job)
    assert sorted(p.name for p in folder.iterdir()) == ["best", "last", "shards.json"]
    best = local_path(model_row.checkpoint_path)
    assert best == folder / "best"
    weights = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.safetensors"))
    # the weights of best and last, and best's off-distribution statistics (training/resnet/ood.py), once
    assert weights == ["best/model.safetensors", "best/ood.safetensors", "last/model.safetensors"], weights
    assert (best / "val_predictions.json").is_file()
    model, _ = load_checkpoint(best)  # the loader the inference worker's ResNet scorer uses
    fresh = RewardResNet(ResNetConfig.from_dict(model_row.config)).eval()
    fresh.load_state_dict(load_file(str(best / "model.safetensors")), strict=True)
    val = read_payload(local_path(snapshot.folder) / "val.pt")
    images = stack_images(val["images"], [3, 32, 32]).numpy()
    probs = predict_proba(model, images)
    np.testing.assert_array_equal(predict_proba(fresh, images), probs)
    cached = json.loads((best / "val_predictions.json").read_text())["probabilities"]
    np.testing.assert_allclose(cached, probs, atol=1e-6)
    assert rank_processes(job.pk) == {}


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_every_rank(project, celery_worker_process):
    snapshot = small_snapshot(project, episodes=3, steps=6)
    job = job_create(project=project, snapshot=snapshot, config={**TWO_RANKS, "epochs": 500, "batch_size": 2})
    wait_for_points(job)
    assert set(rank_processes(job.pk)) == {0, 1}
    job_cancel(job=job)
    job = wait_for(job, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert job.status == "cancelled", job.error
    assert not TrainedModel.objects.filter(job=job).exists()
    assert "cancelled" in job.log
    deadline = time.monotonic() + 10
    while rank_processes(job.pk) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rank_processes(job.pk) == {}


@pytest.mark.django_db(transaction=True)
def test_a_rank_that_dies_fails_the_job_with_a_message_naming_it(project, celery_worker_process):
    snapshot = small_snapshot(project, episodes=3, steps=6)
    job = job_create(project=project, snapshot=snapshot, config={**TWO_RANKS, "epochs": 500, "batch_size": 2})
    wait_for_points(job)
    ranks = rank_processes(job.pk)
    os.kill(ranks[1], signal.SIGKILL)
    job = wait_for(job, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert job.status == "failed"
    assert "rank 1 of 2" in job.error and "SIGKILL" in job.error, job.error
    assert "rank 1 of 2" in job.log
    assert not TrainedModel.objects.filter(job=job).exists()
    assert rank_processes(job.pk) == {}


@pytest.mark.django_db(transaction=True)
def test_two_process_vlm_job_shards_windows_and_saves_one_adapter(project, vlm_fixture_dir, celery_worker_process):
    from training.vlm.checkpoint import checkpoint_load
    from training.vlm.data import trend_split_load
    from training.vlm.scoring import ScoreItem, TrendScorer

    seed_episodes(project, episodes=4, steps=9, size=32)
    snapshot = snapshot_create(project=project, options={"trend_val_split": 0.25, "png_folders": False, "seed": 1})
    trend = local_path(snapshot.folder) / "trend"
    train_windows, _ = trend_split_load(trend, "train")
    config = {
        "base_model_path": str(vlm_fixture_dir),
        "lr": 5e-3,
        "warmup_steps": 2,
        "max_steps": 16,
        "batch_size": 3,
        "grad_accum": 1,
        "eval_every": 8,
        "device": "cpu",
        "num_threads": 1,
        "processes": 2,
    }
    job = job_create(project=project, snapshot=snapshot, kind="vlm", config=config)
    job = wait_for(job, {"succeeded", "failed", "cancelled"}, timeout=240)
    assert job.status == "succeeded", f"{job.error}\n{job.log}"

    # Each rank's first pass over the windows is its own half (the odd window out is drawn twice: padding).
    folder = local_path(job.checkpoint_folder)
    shards = json.loads((folder / "shards.json").read_text())["ranks"]
    first, second = (set(r["indices"]) for r in shards)
    assert first | second == set(range(len(train_windows))) and len(first & second) <= len(train_windows) % 2
    assert [len(r["indices"]) for r in shards] == [5, 5]  # 9 windows padded to 10, half each

    # Rank 0 reported each step once with the loss averaged over ranks, and the loss fell.
    losses = [
        p["train_loss"]
        for p in JobMetric.objects.filter(job=job, kind="step").order_by("step").values_list("values", flat=True)
    ]
    assert len(losses) == 16 and np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.3, losses
    assert [p.step for p in JobMetric.objects.filter(job=job, kind="epoch").order_by("step")] == [8, 16]

    # One adapter, written by rank 0; it loads as the inference worker loads it and scores as evaluated.
    model_row = TrainedModel.objects.get(job=job)
    assert [p.parent.name for p in folder.rglob("adapter_config.json")] == ["adapter"]
    evaluation = json.loads((folder / "evaluation.json").read_text())
    eval_windows, _ = trend_split_load(trend, "eval")
    model, processor, meta = checkpoint_load(local_path(model_row.checkpoint_path), device="cpu")
    probs = TrendScorer(model, processor).probabilities([ScoreItem(w.images(), meta["prompt"]) for w in eval_windows])
    assert np.abs(probs - np.array(evaluation["probabilities"])).max() < 1e-5


@pytest.mark.django_db(transaction=True)
def test_a_second_node_joins_with_the_training_node_command(project, celery_worker_process, process_env):
    snapshot = small_snapshot(project, episodes=3, steps=6)
    spread = {"processes": 1, "nodes": 2, "master_addr": "127.0.0.1", "master_port": free_port()}
    job = job_create(project=project, snapshot=snapshot, config={**TWO_RANKS, "epochs": 2, **spread})
    wait_for(job, {"running"}, timeout=60)  # node 0 (the worker) waits at the rendezvous for node 1
    joined = subprocess.run(
        [sys.executable, "manage.py", "training_node", str(job.pk), "--node-rank", "1"],
        cwd=ROOT,
        env=process_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert joined.returncode == 0, joined.stdout + joined.stderr
    assert "node 1 of 2: 1 rank(s)" in joined.stdout and "its ranks finished" in joined.stdout
    job = wait_for(job, {"succeeded", "failed", "cancelled"}, timeout=60)
    assert job.status == "succeeded", f"{job.error}\n{job.log}"
    shards = json.loads((local_path(job.checkpoint_folder) / "shards.json").read_text())["ranks"]
    assert [r["rank"] for r in shards] == [0, 1] and all(r["indices"] for r in shards)
    assert TrainedModel.objects.filter(job=job).count() == 1
