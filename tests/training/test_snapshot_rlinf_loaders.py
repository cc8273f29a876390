"""Snapshots that RLinf's own loaders read as they are (real PostgreSQL and storage).

The loaders below are our test code mirroring RLinf's reading logic (never imported from RLinf):
- binary payloads: `rlinf/data/datasets/reward_model.py` (`RewardDatasetPayload.load`: `torch.load`, then
  `images` / `labels` / `metadata`, `len(images) == len(labels)`; `RewardBinaryDataset.__getitem__`: image
  tensor and float label);
- trend manifests: `rlinf/data/datasets/vlm/vlm_trend_reward.py` (`_resolve_video_path`: the path as
  written if it is a file, else the part from `data/` on joined onto `data_root`, else a relative path
  joined onto `data_root`; `_parse_raw_record`: `question`, `answer`, the pkl's `main_frames` and
  `extra_view_frames`).
Splits follow `examples/reward/realworld_collect_process_dataset.py` (`_save_pt`, lines 184-268: frame
split, ratio on train only, its metadata keys; that script is not in the 0.3.0 wheel, so no test can run it).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from training.datasets.rlinf_binary import BinaryOptions, FrameRef, split_by_frame
from training.snapshots.services import snapshot_archive, snapshot_create
from training.storage import local_path

from .conftest import seed_episodes

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


def rlinf_payload_load(path: Path) -> tuple[list[torch.Tensor], list[int], dict]:
    payload = torch.load(str(path), map_location="cpu", weights_only=False)
    images, labels = payload.get("images", []), [int(v) for v in payload.get("labels", [])]
    assert len(images) == len(labels)
    for image in images:
        assert image.dtype == torch.uint8 and image.ndim == 3 and image.shape[-1] == 3
    return images, labels, payload.get("metadata", {})


def rlinf_resolve(path: str, data_root: str | None) -> str:
    if os.path.isfile(path):
        return path
    if not data_root:
        return path
    at = path.find("data/")
    if at >= 0 and os.path.isfile(os.path.join(data_root, path[at:])):
        return os.path.join(data_root, path[at:])
    if not os.path.isabs(path) and os.path.isfile(os.path.join(data_root, path)):
        return os.path.join(data_root, path)
    return path


def rlinf_trend_records(manifest: Path, data_root: str) -> list[tuple[str, str, list, list]]:
    records = []
    for line in manifest.read_text().splitlines():
        raw = json.loads(line)
        with open(rlinf_resolve(str(raw["pkl_path"]), data_root), "rb") as fh:
            payload = pickle.load(fh)  # noqa: S301 - our own export, as RLinf's loader reads it
        main, extra = payload.get("main_frames"), payload.get("extra_view_frames")
        assert main is not None and extra is not None
        records.append((str(raw.get("question", "")), str(raw.get("answer", "")), main, extra))
    return records


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


@pytest.mark.parametrize("ratio", [1.0, 2.0, 0.5])
def test_frame_split_follows_rlinfs_real_world_rule(ratio):
    """No released code to run: RLinf's rule lives in `examples/reward/realworld_collect_process_dataset.py`
    (`_save_pt`), and the 0.3.0 wheel ships no `examples/` (nor any split function), so this asserts the rule's
    documented properties, not a copy of it: the first `max(1, int(n * val_split))` of the shuffled frames go to
    validation before any thinning; the fail:success ratio applies to train only, keeping every train success
    frame and `int(successes * ratio)` fail frames; ratio 0 (or no train success) keeps train whole; the seed
    alone decides."""
    frames = [FrameRef(f"e{i // 10}", i, int(i % 3 == 0)) for i in range(40)]
    options = BinaryOptions(val_split=0.2, fail_success_ratio=ratio, seed=7)
    split = split_by_frame(frames, options)
    whole = split_by_frame(frames, BinaryOptions(val_split=0.2, fail_success_ratio=0.0, seed=7))

    assert len(split.val) == max(1, int(40 * 0.2)) == 8
    assert len(set(split.val) | set(split.train)) == len(split.val) + len(split.train)  # disjoint, no repeats
    assert set(whole.val) | set(whole.train) == set(frames) and len(whole.train) == 32  # ratio 0: nothing dropped
    assert split.val == whole.val  # validation is drawn before the ratio, whatever the ratio
    train_success = [f for f in whole.train if f.label == 1]
    train_fail = [f for f in whole.train if f.label == 0]
    assert [f for f in split.train if f.label == 1] != [] and {f for f in split.train if f.label == 1} == set(
        train_success
    )  # every train success frame stays
    kept_fail = [f for f in split.train if f.label == 0]
    assert len(kept_fail) == min(int(len(train_success) * ratio), len(train_fail))
    assert set(kept_fail) <= set(train_fail)
    assert split.val == split_by_frame(frames, options).val and split.train == split_by_frame(frames, options).train
    assert split_by_frame(frames, BinaryOptions(val_split=0.2, fail_success_ratio=ratio, seed=8)).val != split.val
    # train without a success frame is not thinned
    fails_only = [FrameRef("e", i, 0) for i in range(10)]
    assert len(split_by_frame(fails_only, options).train) == 10 - max(1, int(10 * 0.2))


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
    train_images, train_labels, meta = rlinf_payload_load(out / "train.pt")
    val_images, val_labels, _ = rlinf_payload_load(out / "val.pt")
    assert both_classes(train_labels) and both_classes(val_labels)
    assert list(meta) == REALWORLD_KEYS
    assert meta["total_frames"] == 90 and meta["num_success_frames"] == 30 and meta["num_fail_frames"] == 60
    assert meta["num_val_samples"] == len(val_labels) == int(90 * 0.2)
    # ratio 2.0 applied to train only: fails = int(2 * successes) at most
    assert train_labels.count(0) == min(2 * train_labels.count(1), 60 - val_labels.count(0))
    # pixels survive: success images are bright, failure images dark
    for image, label in zip(train_images + val_images, train_labels + val_labels, strict=True):
        assert (int(image[0, 0, 0]) >= 200) == (label == 1)


@pytest.mark.django_db
def test_a_single_episode_builds_a_snapshot_with_both_classes_and_a_trend_manifest(project, media):
    seed_episodes(project, episodes=1, steps=30, size=16)
    snapshot = snapshot_create(project=project, options={"png_folders": False, "trend_val_split": 0.2})
    assert snapshot.status == "ready", snapshot.error
    assert snapshot.stats["split"] == "frame"
    out = local_path(snapshot.folder)
    _, train_labels, _ = rlinf_payload_load(out / "train.pt")
    _, val_labels, _ = rlinf_payload_load(out / "val.pt")
    assert both_classes(train_labels) and both_classes(val_labels)

    # the same window files, read as RLinf reads them, from wherever the download is unpacked
    info = json.loads((out / "trend" / "dataset_info.json").read_text())
    assert info["balance_labels"] is True and info["reverse_positive_as_negative"] is True
    assert info["train_manifest"] == "train/segments.jsonl"
    elsewhere = media / "unpacked"
    with zipfile.ZipFile(snapshot_archive(snapshot=snapshot)) as zf:
        zf.extractall(elsewhere)
    (root,) = elsewhere.iterdir()
    data_root = str(root / "trend")
    cwd = os.getcwd()
    os.chdir(media)  # neither the project folder nor the snapshot folder: paths must go through data_root
    try:
        records = rlinf_trend_records(root / "trend" / info["train_manifest"], data_root)
    finally:
        os.chdir(cwd)
    assert len(records) == info["num_train_samples"] > 0
    for question, answer, main, extra in records:
        assert answer in ("positive", "negative", "unclear") and "Pick up the red cube." in question
        assert len(main) == len(extra) == 5 and main[0].dtype == np.uint8 and main[0].shape == (16, 16, 3)
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
    for name, expected in (("train", {1, 2, 3, 4, 5, 6}), ("val", {7, 8, 9})):
        images, labels, _ = rlinf_payload_load(out / f"{name}.pt")
        assert {int(image[0, 0, 0]) for image in images} == expected
        assert sorted(labels) == sorted([1, 0, 1, 0, 0, 0] if name == "train" else [1, 0, 0])
