"""A snapshot export's payload, split, manifest, PNG folders and trend dataset (real PostgreSQL, storage)."""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

from labeling.models import FrameLabel
from training.datasets.rlinf_binary import read_payload
from training.models import DatasetSnapshot, ImmutableError
from training.snapshots.services import (
    BuildProgress,
    BuildSuperseded,
    SnapshotError,
    snapshot_archive,
    snapshot_build,
    snapshot_create,
)
from training.storage import local_path
from training.vlm.data import trend_split_load

RLINF_METADATA_KEYS = [
    "raw_data_path",
    "num_samples_per_episode",
    "keep_last_frame",
    "val_split",
    "fail_success_ratio",
    "random_seed",
    "num_train_samples",
    "num_val_samples",
]
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


@pytest.mark.django_db
def test_snapshot_payload_matches_rlinfs_format_and_split(labeled_project, user):
    snapshot = snapshot_create(
        project=labeled_project, options={"fail_success_ratio": 1.0, "val_split": 0.34, "seed": 7}, created_by=user
    )
    assert snapshot.status == "ready", snapshot.error
    assert snapshot.number == 1
    folder = local_path(snapshot.folder)
    train, val = read_payload(folder / "train.pt"), read_payload(folder / "val.pt")
    for payload in (train, val):
        assert set(payload) == {"images", "labels", "metadata"}
        assert list(payload["metadata"]) == RLINF_METADATA_KEYS
        assert len(payload["images"]) == len(payload["labels"]) > 0
        assert all(img.dtype == torch.uint8 and img.shape == (32, 32, 3) for img in payload["images"])
        assert set(payload["labels"]) <= {0, 1}
        success = sum(payload["labels"])
        assert len(payload["labels"]) - success == int(success * 1.0)  # 5 fail frames per episode >= success
    assert train["metadata"]["num_train_samples"] == len(train["images"])
    assert train["metadata"]["num_val_samples"] == len(val["images"])
    assert train["metadata"]["random_seed"] == 7
    stats = snapshot.stats
    assert len(stats["val_episodes"]) == 2 and len(stats["train_episodes"]) == 4  # max(1, int(6 * 0.34))
    assert not set(stats["val_episodes"]) & set(stats["train_episodes"])
    rows = [json.loads(line) for line in (folder / "labels.jsonl").read_text().splitlines()]
    assert len(rows) == 60 and rows[0]["author"] == "" and rows[0]["source"] == "human"
    assert {r["split"] for r in rows if r["episode"] in stats["val_episodes"]} <= {"val", ""}
    success_pngs = list((folder / "success").glob("*.png"))
    assert len(success_pngs) == stats["train"]["success"] + stats["val"]["success"]
    assert len(list((folder / "failure").glob("*.png"))) == stats["train"]["fail"] + stats["val"]["fail"]


@pytest.mark.django_db
def test_trend_dataset_has_every_field_and_loads_for_vlm_training(labeled_project):
    snapshot = snapshot_create(
        project=labeled_project,
        options={"trend_val_split": 0.2, "trend_reverse_augmentation": True, "trend_balance": False},
    )
    folder = local_path(snapshot.folder) / "trend"
    info = json.loads((folder / "dataset_info.json").read_text())
    for key in (
        "window_size",
        "stride",
        "delta_threshold",
        "tail_unclear_ratio",
        "val_split",
        "num_train_samples",
        "num_eval_samples",
        "train_label_counts",
        "eval_label_counts",
        "train_manifest",
        "eval_manifest",
    ):
        assert key in info
    assert (
        info["num_train_samples"] + info["num_eval_samples"] == 6 * 3 + 6
    )  # 3 windows per episode + reversed positives
    row = json.loads((folder / "train" / "segments.jsonl").read_text().splitlines()[0])
    assert set(row) == SEGMENT_KEYS
    assert row["question"] == row["prompt"] and "Pick up the red cube." in row["prompt"]
    assert row["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": row["answer"]}]}
    assert set(row["segment_metadata"]) == {
        "start_step",
        "end_step",
        "window_size",
        "episode_id",
        "env_idx",
        "success",
        "augmentation",
        "views",
    }
    assert set(row["supervision"]) == {
        "label",
        "score",
        "score_name",
        "score_source",
        "delta_threshold",
        "start_gae",
        "end_gae",
    }
    assert row["supervision"]["score_name"] == "gae_delta_window" and row["supervision"]["score_source"] == "gae"
    assert row["segment_metadata"]["views"] == ["main_images", "extra_view_images[0]"]
    assert not Path(row["pkl_path"]).is_absolute()
    with open(folder / row["pkl_path"], "rb") as fh:
        window = pickle.load(fh)  # our own file, just written
    assert set(window) == {
        "main_frames",
        "extra_view_frames",
        "label",
        "score",
        "source_episode_path",
        "start_idx",
        "end_idx",
        "augmentation",
    }
    assert len(window["main_frames"]) == 5 and window["main_frames"][0].dtype.name == "uint8"
    assert row["pkl_path"].endswith(
        f"{row['answer']}_{row['source_episode_path']}_frames_{row['segment_metadata']['start_step']:04d}_{row['segment_metadata']['end_step']:04d}.pkl"
    )
    windows, _ = trend_split_load(folder, "train")  # the VLM trainer's own restricted loader
    assert len(windows) == info["num_train_samples"]


@pytest.mark.django_db
def test_human_labels_override_proposals_and_sources_are_an_option(labeled_project):
    episode = labeled_project.episodes.order_by("created_at").first()
    step = episode.steps.get(index=0)
    FrameLabel.objects.create(project=labeled_project, episode=episode, step=step, value="success", source="proposal")
    unlabeled = labeled_project.episodes.order_by("created_at").last()
    FrameLabel.objects.filter(episode=unlabeled, source="human").delete()
    for s in unlabeled.steps.all():
        FrameLabel.objects.create(
            project=labeled_project, episode=unlabeled, step=s, value="success", source="proposal"
        )
    human_only = snapshot_create(project=labeled_project, options={"trend": False, "png_folders": False})
    with_proposals = snapshot_create(
        project=labeled_project, options={"sources": ["human", "proposal"], "trend": False}
    )
    assert human_only.stats["labeled_frames"] == 50
    assert with_proposals.stats["labeled_frames"] == 60
    rows = [json.loads(x) for x in (local_path(with_proposals.folder) / "labels.jsonl").read_text().splitlines()]
    first = next(r for r in rows if r["episode"] == str(episode.uuid) and r["step"] == 0)
    assert first["source"] == "human" and first["value"] == "fail"
    assert with_proposals.number == human_only.number + 1


@pytest.mark.django_db
def test_snapshot_is_immutable_and_archives(labeled_project):
    snapshot = snapshot_create(project=labeled_project, options={"trend": False})
    snapshot.options = {"seed": 1}
    with pytest.raises(ImmutableError):
        snapshot.save()
    archive = snapshot_archive(snapshot=DatasetSnapshot.objects.get(pk=snapshot.pk))
    names = zipfile.ZipFile(archive).namelist()
    assert any(n.endswith("/train.pt") for n in names) and any("/success/" in n for n in names)


@pytest.mark.django_db
def test_bad_options_and_empty_projects_fail_clearly(project, settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path)
    with pytest.raises(ValueError, match="unknown label source"):
        snapshot_create(project=project, options={"sources": ["robot"]})
    snapshot = snapshot_create(project=project)
    assert snapshot.status == "failed" and "no labeled frames" in snapshot.error
    with pytest.raises(SnapshotError):
        snapshot_create(project=project, options={"camera": "wrist"})


@pytest.mark.django_db
def test_a_snapshot_without_fail_labels_fails_with_a_reason_counts_and_what_to_do(labeled_project, user_client):
    FrameLabel.objects.filter(episode__project=labeled_project, value="fail").delete()
    snapshot = snapshot_create(project=labeled_project)
    assert snapshot.status == "failed"
    reason, counts, advice = snapshot.error.splitlines()
    assert reason.startswith("Cannot build a usable snapshot:") and "has no fail frames" in reason
    assert counts.startswith("Frames: train ") and " success / 0 fail; val " in counts and "{" not in counts
    assert advice.startswith("What to do: label both success and fail frames")
    page = user_client.get(f"/snapshots/{snapshot.pk}/").content.decode()
    assert "no frames written" in page and " of ?" not in page


@pytest.mark.django_db
def test_a_ready_snapshot_counts_image_writes_and_says_why_they_are_twice_its_frames(labeled_project, user_client):
    snapshot = snapshot_create(project=labeled_project, options={"png_folders": True, "trend": False})
    assert snapshot.status == "ready"
    frames = snapshot.stats["train"]["total"] + snapshot.stats["val"]["total"]
    page = user_client.get(f"/snapshots/{snapshot.pk}/").content.decode()
    assert f"{2 * frames} of {2 * frames} image writes (each frame goes to train.pt or val.pt and to its PNG" in page


@pytest.mark.django_db
def test_build_progress_is_stored_in_steps_and_never_on_a_finished_snapshot(labeled_project):
    snapshot = snapshot_create(project=labeled_project, options={"trend": False}, build=False)
    progress = BuildProgress(snapshot.pk, total=10, every=4, seconds=3600, attempt=0)
    count = progress.counting(lambda ref: ref)
    for ref in range(5):
        assert count(ref) == ref  # the loader's value passes through
    snapshot.refresh_from_db()
    assert (snapshot.frames_done, snapshot.frames_total, snapshot.percent) == (4, 10, 40)
    assert snapshot.heartbeat_at is not None  # each store is the build's heartbeat...
    assert snapshot_build(snapshot_id=snapshot.pk) == "building"  # ...so a second build of it does not start
    DatasetSnapshot.objects.filter(pk=snapshot.pk).update(heartbeat_at=None)  # the first was lost and requeued
    assert snapshot_build(snapshot_id=snapshot.pk) == "ready"
    snapshot.refresh_from_db()
    written = snapshot.stats["train"]["total"] + snapshot.stats["val"]["total"]
    per_frame = 2 if snapshot.options["png_folders"] else 1  # the payloads, then the PNG folders
    assert snapshot.frames_done == snapshot.frames_total == written * per_frame > 0 and snapshot.progress == 1.0
    with pytest.raises(BuildSuperseded):  # a late writer (the lost build) stops: it cannot move a ready snapshot
        for ref in range(8):
            count(ref)
    assert DatasetSnapshot.objects.get(pk=snapshot.pk).frames_total == snapshot.frames_total
    assert snapshot_build(snapshot_id=snapshot.pk) == "ready" and snapshot_build(snapshot_id=10**9) == "deleted"


@pytest.mark.django_db
def test_a_snapshot_deleted_while_building_leaves_no_files(labeled_project, monkeypatch):
    from training.snapshots import services as snapshot_services

    snapshot = snapshot_create(project=labeled_project, options={"trend": False}, build=False)
    real_write = snapshot_services._write_files

    def delete_midway(row, folder, attempt):
        snapshot_services.snapshot_delete(snapshot=row)  # someone deletes it from the page meanwhile
        folder.mkdir(parents=True)  # ...while the task goes on writing its files
        return real_write(row, folder, attempt)

    monkeypatch.setattr(snapshot_services, "_write_files", delete_midway)
    assert snapshot_build(snapshot_id=snapshot.pk) == "deleted"
    assert not local_path(snapshot.folder).exists() and not DatasetSnapshot.objects.filter(pk=snapshot.pk).exists()
