"""RLinf 0.3.0's own classes read our files as they are: a trained ResNet's `model.safetensors` and
`full_weights.pt` (its `ResNetRewardModel`, strict), a snapshot's `train.pt`/`val.pt` (its `RewardBinaryDataset`)
and a snapshot's trend manifest (its `QwenTrendProgressSFTDataset`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from training.storage import local_path

from ..training.conftest import seed_episodes
from .conftest import side_run

TINY = {"hidden_dim": 16, "image_size": [3, 32, 32], "epochs": 2, "batch_size": 16, "warmup_steps": 0, "num_threads": 1}
# the same float32 convolutions under the torch of two environments (bit-equal results are not promised)
TOLERANCE = 1e-5


def digest(array) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, dtype=np.uint8)).tobytes()).hexdigest()[:16]


@pytest.mark.django_db
def test_rlinf_loads_our_resnet_weights_strictly_and_reads_our_binary_payloads(project):
    from training.kit.family_parts import ModelSpec
    from training.models import TrainedModel
    from training.resnet.checkpoint import RLINF_WEIGHTS, WEIGHTS_FILE
    from training.resnet.runner import read_payload
    from training.resnet.scorer import ResNetScorer
    from training.services import job_create, job_execute
    from training.snapshots.services import snapshot_create

    seed_episodes(project, episodes=6, steps=10, size=32, windows=False)
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "trend": False, "png_folders": False})
    assert snapshot.status == "ready", snapshot.error
    job = job_create(project=project, snapshot=snapshot, config={**TINY, "save_rlinf_layout": True}, enqueue=False)
    job_execute(job_id=job.pk)
    best = local_path(TrainedModel.objects.get(job=job).checkpoint_path)
    rlinf_weights = best.parent / "checkpoints" / "best_model" / RLINF_WEIGHTS
    assert rlinf_weights.is_file(), f"no RLinf layout beside {best}"

    data = local_path(snapshot.folder)
    ours = {name: read_payload(data / f"{name}.pt") for name in ("train", "val")}
    val_images = np.stack([image.numpy() for image in ours["val"]["images"]])
    from inference.rewards import result_parts

    results = ResNetScorer(ModelSpec(kind="resnet", folder=best)).score(val_images)  # with `ood` beside each
    served = np.array([result_parts(r)[0] for r in results])
    assert served.max() - served.min() > 1e-3, "a constant scorer would prove nothing"

    theirs = side_run(
        "resnet_files",
        payloads={name: data / f"{name}.pt" for name in ours},
        weights={"safetensors": best / WEIGHTS_FILE, "full_weights": rlinf_weights},
        model={"arch": "resnet18", "hidden_dim": TINY["hidden_dim"], "image_size": TINY["image_size"], "dropout": 0.1},
    )
    for name, payload in ours.items():
        split = theirs["splits"][name]
        assert split["count"] == len(payload["labels"]) > 0
        assert split["labels"] == [int(v) for v in payload["labels"]]
        assert split["digests"] == [digest(image.numpy()) for image in payload["images"]], f"{name} pixels differ"
        assert split["shapes"] == [[32, 32, 3]]
    for name, probabilities in theirs["probabilities"].items():
        difference = np.abs(np.array(probabilities) - served).max()
        assert difference < TOLERANCE, (
            f"RLinf with {name}: {np.round(probabilities, 5)} against served {served.round(5)}"
        )


@pytest.mark.django_db
def test_rlinf_trend_dataset_yields_our_manifest_samples(project, hub_qwen3_vl, tmp_path):
    from training.snapshots.services import snapshot_create
    from training.vlm.data import trend_split_load

    seed_episodes(project, episodes=3, steps=10, size=32)
    snapshot = snapshot_create(project=project, options={"png_folders": False, "trend_val_split": 0.34})
    assert snapshot.status == "ready", snapshot.error
    trend = local_path(snapshot.folder) / "trend"
    windows, rows = trend_split_load(trend, "train")
    assert len(windows) > 2 and {w.label for w in windows} >= {"positive", "negative"}

    theirs = side_run(
        "trend_dataset",
        manifest=trend / "train" / "segments.jsonl",
        data_root=trend,
        model_path=hub_qwen3_vl,
        cwd=tmp_path,  # the manifest's relative paths must resolve through data_root, not the working directory
    )
    assert theirs["count"] == len(windows)
    prompt = _served_prompt_ids(hub_qwen3_vl, windows, rows[0]["question"])
    for sample, window, row, ids in zip(theirs["samples"], windows, rows, prompt, strict=True):
        assert sample["answer"] == window.label == row["answer"]
        assert sample["question"] == row["question"] and project.task_description in sample["question"]
        assert sample["main"] == [digest(f) for f in window.main_frames]
        assert sample["extra"] == [digest(f) for f in window.extra_frames]
        assert sample["video_grid"][0][0] >= 2, "a window of 5 frames is at least 2 temporal patches"
        assert sample["prompt_ids"] == ids, "RLinf trains on other prompt tokens than we serve the model with"


def _served_prompt_ids(model: Path, windows, prompt: str) -> list[list[int]]:
    """The token ids our VLM scorer gives the model for each window under the manifest's prompt."""
    import torch

    from training.kit.family_parts import ModelSpec
    from training.vlm.scorer import VLMScorer
    from training.vlm.scoring import ScoreItem

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        scorer = VLMScorer(ModelSpec(kind="vlm", folder=model)).scorer
        return [scorer.encode([ScoreItem(w.images(), prompt)])["input_ids"][0].tolist() for w in windows]
    finally:
        torch.set_num_threads(threads)
