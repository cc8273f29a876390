"""Importing labeled frames: success/ + failure/ image folders and RLinf train.pt / val.pt payloads."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import numpy as np
import pytest
import torch
from django.core.management import CommandError, call_command

from common.images.checks import decode_rgb
from labeling.imports.services import import_paths
from labeling.models import Episode, Frame, FrameLabel, LabelChange, Step
from tests.labeling.import_builders import (
    RunsShell,
    image,
    label_folders,
    png_bytes,
    reward_payload,
    rlinf_episode,
    write_pickle,
)


@pytest.fixture
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"


def pixels(frame: Frame) -> np.ndarray:
    with frame.image.open("rb") as handle:
        return decode_rgb(handle.read())


def labels_of(episode: Episode) -> list[str]:
    return list(
        FrameLabel.objects.filter(episode=episode, source="human")
        .order_by("step__index")
        .values_list("value", flat=True)
    )


@pytest.mark.django_db
def test_label_folders_become_one_episode_each_with_human_labels(project, media, tmp_path):
    root = label_folders(tmp_path / "collected", success=2, failure=3)

    summary = import_paths(project=project, paths=[root])

    assert (summary.episodes, summary.steps, summary.frames, summary.labels) == (2, 5, 5, 5)
    success = Episode.objects.get(metadata__label="success")
    failure = Episode.objects.get(metadata__label="fail")
    assert success.success is True and failure.success is False and success.source == "import"
    assert labels_of(success) == ["success", "success"] and labels_of(failure) == ["fail"] * 3
    label = FrameLabel.objects.filter(episode=failure).first()
    assert label.author is None and label.params == {"imported_from": "collected/failure"}
    # natural order: frame_0, frame_5, frame_10
    steps = list(Step.objects.filter(episode=failure).order_by("index"))
    assert [s.info["file_name"] for s in steps] == ["frame_0.png", "frame_5.png", "frame_10.png"]
    for i, step in enumerate(steps):
        frame = step.frames.get()
        assert frame.camera == "main"
        np.testing.assert_array_equal(pixels(frame), image(500 + i))
    history = LabelChange.objects.filter(kind="frame", action="set", source="human", author=None)
    assert sorted(history.values_list("new_value", "start", "end")) == [("fail", 0, 2), ("success", 0, 1)]

    again = import_paths(project=project, paths=[root])
    assert again.episodes == 0 and len(again.already_imported) == 2 and FrameLabel.objects.count() == 5


@pytest.mark.django_db
def test_folder_images_in_other_modes_are_converted_and_bad_files_reported(project, media, tmp_path):
    root = tmp_path / "run"
    (root / "success").mkdir(parents=True)
    (root / "success" / "a_1.png").write_bytes(png_bytes(image(1), mode="RGBA"))
    (root / "success" / "a_2.png").write_bytes(b"not a png")
    (root / "success" / "notes.txt").write_text("x")

    summary = import_paths(project=project, paths=[root])

    assert summary.episodes == 1 and summary.frames == 1
    np.testing.assert_array_equal(pixels(Frame.objects.get()), image(1))
    reasons = dict(summary.skipped)
    assert reasons["run/success/a_2.png"].startswith("undecodable image")
    assert reasons["run/success/notes.txt"] == "not an image (.txt)"


@pytest.mark.django_db
def test_train_pt_payload_becomes_labeled_frames(project, media, tmp_path):
    path = tmp_path / "train.pt"
    torch.save(reward_payload([1, 0, 0, 1, 0]), path)

    summary = import_paths(project=project, paths=[path])

    assert (summary.episodes, summary.steps, summary.frames, summary.labels) == (1, 5, 5, 5)
    episode = Episode.objects.get()
    assert episode.success is None and episode.status == "finished"
    assert episode.metadata["payload_metadata"] == {"val_split": 0.2, "random_seed": 42}
    assert labels_of(episode) == ["success", "fail", "fail", "success", "fail"]
    for step in Step.objects.filter(episode=episode).order_by("index"):
        np.testing.assert_array_equal(pixels(step.frames.get()), image(300 + step.index))


@pytest.mark.django_db
def test_payloads_that_are_not_plain_tensors_are_refused(project, media, tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "val.pt"
    torch.save({"images": [], "labels": [], "metadata": {"x": RunsShell(marker)}}, evil)
    uneven = tmp_path / "train.pt"
    torch.save({"images": [torch.zeros(4, 4, 3, dtype=torch.uint8)], "labels": [1, 0], "metadata": {}}, uneven)
    floats = tmp_path / "floats.pt"
    torch.save({"images": [torch.zeros(4, 4, 3)], "labels": [1], "metadata": {}}, floats)

    summary = import_paths(project=project, paths=[evil, uneven, floats])

    assert not marker.exists()
    reasons = dict(summary.failed)
    assert reasons["val.pt"].startswith("refused: the file holds more than tensors")
    assert reasons["train.pt"] == "1 images but 2 labels"
    assert reasons["floats.pt"] == "images[0] must be a uint8 tensor [H,W,3]; got [4, 4, 3]"
    assert not Episode.objects.exists()


@pytest.mark.django_db
def test_command_detects_every_kind_and_prints_a_summary(project, media, tmp_path, capsys):
    data = tmp_path / "data"
    label_folders(data / "collector", success=1, failure=1)
    write_pickle(data / "rank_0_env_0_episode_0_success.pkl", rlinf_episode(num_actions=2))
    torch.save(reward_payload([1, 0]), data / "val.pt")
    out = StringIO()

    call_command("import_episodes", str(data), project=project.name, stdout=out)

    assert out.getvalue().splitlines() == ["Imported 4 episode(s), 7 step(s), 10 frame(s), 4 label(s)."]
    assert "Importing" in capsys.readouterr().err  # the progress bar

    out = StringIO()
    call_command("import_episodes", str(data), project=project.name, no_progress=True, stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "Imported 0 episode(s), 0 step(s), 0 frame(s), 0 label(s)."
    assert lines[1] == "Skipped 4 file(s):"
    assert all("already imported as episode" in line for line in lines[2:])


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args, message",
    [
        (["--project", "Nope", "x.pkl"], "no project named 'Nope'; existing projects: PickCube"),
        (["--project", "PickCube", "missing.pkl"], "missing.pkl: no such file or folder"),
        (["--project", "PickCube", "notes.txt"], "unsupported file type .txt"),
        (["--project", "PickCube", "."], r"nothing to import: .* \(passed over: notes.txt\)"),
    ],
)
def test_command_errors_are_clear(project, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CommandError, match=message):
        call_command("import_episodes", *args, no_progress=True, stdout=StringIO())
