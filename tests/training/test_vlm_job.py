"""A Qwen3-VL LoRA job end to end: trend snapshot -> real Celery worker -> curves, checkpoint, evaluation."""

from __future__ import annotations

import json
import pickle
import time

import numpy as np
import pytest

from tests.training.conftest import seed_episodes

SEGMENT_KEYS = {
    "task",
    "prompt",
    "question",
    "answer",
    "pkl_path",
    "messages",
    "source_episode_path",
    "segment_metadata",
    "supervision",
}
PKL_KEYS = {
    "main_frames",
    "extra_view_frames",
    "label",
    "score",
    "source_episode_path",
    "start_idx",
    "end_idx",
    "augmentation",
}


def _wait_finished(job, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.finished:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job still {job.status} after {timeout}s; log:\n{job.log}\nprogress {job.progress}")


def _check_trend_export(project, trend):
    """The dataset fed to training is RLinf's trend format (formats.md section 4); returns the rendered prompt."""
    from training.vlm.data import trend_split_load
    from training.vlm.prompt import prompt_render

    info = json.loads((trend / "dataset_info.json").read_text())
    assert info["num_train_samples"] == 9 and info["num_eval_samples"] == 3
    prompt = prompt_render(project.prompt_template, task=project.task_description, window_size=5)
    rows = [json.loads(line) for line in (trend / "train" / "segments.jsonl").read_text().splitlines()]
    for row in rows:
        assert set(row) == SEGMENT_KEYS and row["prompt"] == row["question"] == prompt
        assert row["messages"][1]["content"][0]["text"] == row["answer"]
        with open(trend / row["pkl_path"], "rb") as fh:
            data = pickle.load(fh)  # noqa: S301 - our own export, checked for its exact keys here
        assert set(data) == PKL_KEYS and len(data["main_frames"]) == len(data["extra_view_frames"]) == 5
        assert data["main_frames"][0].dtype == np.uint8 and data["main_frames"][0].shape == (32, 32, 3)
    train_windows, _ = trend_split_load(trend, "train")
    assert [w.label for w in train_windows] == [row["answer"] for row in rows]
    return prompt


def _check_live_curves(job):
    """Live curves were stored: a loss per step that falls, a validation point per evaluation."""
    from training.models import JobMetric

    steps = list(JobMetric.objects.filter(job=job, kind="step").order_by("step").values_list("values", flat=True))
    assert len(steps) == 24
    losses = [point["train_loss"] for point in steps]
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3
    epochs = JobMetric.objects.filter(job=job, kind="epoch").order_by("step")
    assert [p.step for p in epochs] == [8, 16, 24] and {"val_loss", "val_acc"} <= set(epochs[0].values)
    assert {"train_loss", "train_acc", "lr"} <= set(steps[0])  # the keys the job page plots


def _check_adapter_reloads(model_row, prompt, trend):
    """The adapter reloads and gives the same label probabilities as the trained model did; returns the
    stored evaluation."""
    from training.storage import local_path
    from training.vlm.checkpoint import checkpoint_load
    from training.vlm.data import trend_split_load
    from training.vlm.rlinf_export import FULL_WEIGHTS
    from training.vlm.scoring import ScoreItem, TrendScorer

    assert model_row.kind == "vlm" and model_row.config["prompt"] == prompt
    folder = local_path(model_row.checkpoint_path)
    assert (folder / "adapter" / "adapter_config.json").is_file() and (folder / FULL_WEIGHTS).is_file()
    evaluation = json.loads((folder / "evaluation.json").read_text())
    eval_windows, _ = trend_split_load(trend, "eval")
    model, processor, meta = checkpoint_load(folder, device="cpu")
    probs = TrendScorer(model, processor).probabilities([ScoreItem(w.images(), meta["prompt"]) for w in eval_windows])
    assert np.abs(probs - np.array(evaluation["probabilities"])).max() < 1e-5
    return evaluation


def _check_evaluation(evaluation, model_row, episodes, user_client):
    """Evaluation: per-class precision/recall, confusion matrix, wrong windows one click from labeling."""
    assert sum(map(sum, evaluation["confusion"])) == 3
    assert set(evaluation["per_class"]) == {"positive", "negative", "unclear"}
    uuids = {str(e.uuid) for e in episodes}
    for window in evaluation["windows"]:
        assert window["episode_uuid"] in uuids
        assert window["link"] == f"/episodes/{window['episode_uuid']}/label?step={window['start_step']}"
    assert model_row.metrics["confusion"] == evaluation["confusion"]
    page = user_client.get(f"/models/{model_row.pk}/vlm-evaluation")
    assert page.status_code == 200 and b"Confusion matrix" in page.content
    for wrong in evaluation["wrong"]:
        assert evaluation["windows"][wrong["index"]]["link"].encode() in page.content


@pytest.mark.django_db(transaction=True)
def test_vlm_job_fine_tunes_the_fixture_through_a_celery_worker(
    project, user_client, vlm_fixture_dir, celery_worker_process
):
    from common.jobs.models import JobStatus
    from training.models import TrainedModel
    from training.services import job_create
    from training.snapshots.services import snapshot_create
    from training.storage import local_path

    episodes = seed_episodes(project, episodes=4, steps=9, size=32)
    snapshot = snapshot_create(project=project, options={"trend_val_split": 0.25, "png_folders": False, "seed": 1})
    trend = local_path(snapshot.folder) / "trend"
    prompt = _check_trend_export(project, trend)

    config = {
        "base_model_path": str(vlm_fixture_dir),
        "lr": 5e-3,
        "warmup_steps": 2,
        "max_steps": 24,
        "batch_size": 3,
        "grad_accum": 1,
        "eval_every": 8,
        "save_full_weights": True,
        "device": "cpu",
        "num_threads": 1,
    }
    job = job_create(project=project, snapshot=snapshot, kind="vlm", config=config)
    job = _wait_finished(job)
    assert job.status == JobStatus.SUCCEEDED, job.error

    _check_live_curves(job)
    model_row = TrainedModel.objects.get(job=job)
    evaluation = _check_adapter_reloads(model_row, prompt, trend)
    _check_evaluation(evaluation, model_row, episodes, user_client)


@pytest.mark.django_db
def test_vlm_job_with_a_missing_model_folder_is_refused_before_queueing(project, settings):
    from training.services import job_create
    from training.snapshots.services import snapshot_create

    seed_episodes(project, episodes=2, steps=6, size=32)
    snapshot = snapshot_create(project=project, options={"png_folders": False, "seed": 1})
    missing = str(settings.MODEL_DIR / "none")
    with pytest.raises(ValueError, match="'none' is not a folder in the model folder: download a Qwen3-VL model"):
        job_create(project=project, snapshot=snapshot, kind="vlm", config={"base_model_path": missing})


@pytest.mark.django_db
def test_a_web_without_the_models_queues_the_job_and_the_worker_without_them_fails_it_saying_why(project, settings):
    """TRAINING_MODELS_ON_WEB=0 (README "Scaling out": only the workers have MODEL_DIR's models): submission
    still confines the path to the model folder, but leaves the existence check to the worker that runs the job,
    which fails it with the reason submission would have given."""
    from common.jobs.models import JobStatus
    from training.models import TrainingJob
    from training.services import job_create, job_execute
    from training.snapshots.services import snapshot_create

    settings.TRAINING_MODELS_ON_WEB = False
    seed_episodes(project, episodes=2, steps=6, size=32)
    snapshot = snapshot_create(project=project, options={"png_folders": False, "seed": 1})
    with pytest.raises(ValueError, match="base_model_path must name a path inside the model folder"):
        job_create(project=project, snapshot=snapshot, kind="vlm", config={"base_model_path": "../elsewhere"})
    job = job_create(project=project, snapshot=snapshot, kind="vlm", config={"base_model_path": "on-the-workers"})
    assert job.config["base_model_path"] == "on-the-workers"

    assert job_execute(job_id=job.pk) == JobStatus.FAILED  # this "worker" has no such folder either
    job = TrainingJob.objects.get(pk=job.pk)
    assert "'on-the-workers' is not a folder in the model folder" in job.error
