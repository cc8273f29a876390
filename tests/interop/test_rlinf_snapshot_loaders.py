"""Snapshots that RLinf 0.3.0's own loaders read as they are (real PostgreSQL and storage; RLinf's code in the
side environment): its `RewardBinaryDataset` reads `train.pt`/`val.pt` (labels, metadata, pixels), and its VLM
trend SFT dataset (`QwenTrendProgressSFTDataset`) reads the trend manifest of an unpacked download from another
working directory, through `data_root`.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from training.snapshots.services import snapshot_archive, snapshot_create
from training.storage import local_path

from ..training.conftest import seed_episodes
from .conftest import side_run

# what RLinf's keyboard-collection path writes, in its order (shared/reference formats section 2)
REALWORLD_KEYS = [
    "num_success_frames",
    "num_fail_frames",
    "total_frames",
    "val_split",
    "fail_success_ratio",
    "random_seed",
    "num_train_samples",
    "num_val_samples",
]


def rlinf_read(folder: Path) -> dict:
    """RLinf's RewardBinaryDataset over the snapshot's train.pt and val.pt (tests/interop/side_runner.py)."""
    return side_run("binary_payloads", paths={name: folder / f"{name}.pt" for name in ("train", "val")})


def png(value: int, size: int = 16) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), value, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def both_classes(labels: list[int]) -> bool:
    return 0 in labels and 1 in labels


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path


@pytest.mark.django_db
def test_imported_success_and_failure_folders_alone_build_a_snapshot_rlinf_reads(project, media):
    from labeling.imports.services import import_paths

    folder = media / "collected"
    for name, values in (("success", range(200, 230)), ("failure", range(10, 70))):
        (folder / name).mkdir(parents=True)
        for i, value in enumerate(values):
            (folder / name / f"{i:03d}.png").write_bytes(png(value))
    import_paths(project=project, paths=[folder])

    snapshot = snapshot_create(project=project, options={"png_folders": False, "trend": False})
    assert snapshot.status == "ready", snapshot.error
    assert snapshot.stats["split"] == "frame" and "by episode" in snapshot.stats["split_reason"]
    out = local_path(snapshot.folder)
    read = rlinf_read(out)
    train_labels, val_labels = read["train"]["labels"], read["val"]["labels"]
    meta = dict(read["train"]["metadata"])
    assert both_classes(train_labels) and both_classes(val_labels)
    assert [key for key, _ in read["train"]["metadata"]] == REALWORLD_KEYS
    assert meta["total_frames"] == 90 and meta["num_success_frames"] == 30 and meta["num_fail_frames"] == 60
    assert meta["num_val_samples"] == len(val_labels) == int(90 * 0.2)
    # ratio 2.0 applied to train only: fails = int(2 * successes) at most
    assert train_labels.count(0) == min(2 * train_labels.count(1), 60 - val_labels.count(0))
    # pixels survive: success images are bright, failure images dark
    corners = read["train"]["corners"] + read["val"]["corners"]
    for corner, label in zip(corners, train_labels + val_labels, strict=True):
        assert (corner >= 200) == (label == 1)
    assert read["train"]["dtypes"] == ["torch.uint8"] and read["train"]["shapes"] == [[16, 16, 3]]


@pytest.mark.django_db
def test_a_single_episode_builds_a_snapshot_with_both_classes_and_a_trend_manifest(project, media, hub_qwen3_vl):
    seed_episodes(project, episodes=1, steps=30, size=32)  # Qwen3-VL's processor takes 32 px at least
    snapshot = snapshot_create(project=project, options={"png_folders": False, "trend_val_split": 0.2})
    assert snapshot.status == "ready", snapshot.error
    assert snapshot.stats["split"] == "frame"
    out = local_path(snapshot.folder)
    read = rlinf_read(out)
    assert both_classes(read["train"]["labels"]) and both_classes(read["val"]["labels"])

    # the same window files, read as RLinf reads them, from wherever the download is unpacked
    info = json.loads((out / "trend" / "dataset_info.json").read_text())
    assert info["balance_labels"] is True and info["reverse_positive_as_negative"] is True
    assert info["train_manifest"] == "train/segments.jsonl"
    elsewhere = media / "unpacked"
    with zipfile.ZipFile(snapshot_archive(snapshot=snapshot)) as zf:
        zf.extractall(elsewhere)
    (root,) = elsewhere.iterdir()
    theirs = side_run(
        "trend_dataset",
        manifest=root / "trend" / info["train_manifest"],
        data_root=root / "trend",
        model_path=hub_qwen3_vl,
        cwd=media,  # neither the project folder nor the snapshot folder: paths must go through data_root
    )
    assert theirs["count"] == info["num_train_samples"] > 0
    for sample in theirs["samples"]:
        assert sample["answer"] in ("positive", "negative", "unclear") and "Pick up the red cube." in sample["question"]
        assert len(sample["main"]) == len(sample["extra"]) == 5 and sample["shapes"] == [[32, 32, 3]]
        assert sample["dtypes"] == ["uint8"]
    # balanced to the smallest label, reversed positives counted among the negatives
    counts = info["train_label_counts"]
    present = [n for n in counts.values() if n]
    assert len(set(present)) == 1


@pytest.mark.django_db
def test_an_imported_train_and_val_payload_keeps_its_split(project, media):
    from labeling.imports.services import import_paths

    folder = media / "payload"
    folder.mkdir()
    for name, values, labels in (("train", [1, 2, 3, 4, 5, 6], [1, 0, 1, 0, 0, 0]), ("val", [7, 8, 9], [1, 0, 0])):
        images = [torch.full((8, 8, 3), v, dtype=torch.uint8) for v in values]
        torch.save({"images": images, "labels": labels, "metadata": {"val_split": 0.2}}, folder / f"{name}.pt")
    import_paths(project=project, paths=[folder])
    snapshot = snapshot_create(project=project, options={"png_folders": False, "trend": False})
    assert snapshot.status == "ready", snapshot.error
    assert snapshot.stats["split"] == "imported"
    out = local_path(snapshot.folder)
    read = rlinf_read(out)
    for name, expected in (("train", {1, 2, 3, 4, 5, 6}), ("val", {7, 8, 9})):
        assert set(read[name]["corners"]) == expected
        assert sorted(read[name]["labels"]) == sorted([1, 0, 1, 0, 0, 0] if name == "train" else [1, 0, 0])
