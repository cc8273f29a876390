"""The export_snapshot and train management commands."""

from __future__ import annotations

import zipfile

import pytest
from django.core.management import CommandError, call_command

from training.models import DatasetSnapshot, TrainedModel


@pytest.mark.django_db
def test_export_snapshot_then_train_inline(labeled_project, tmp_path, capsys):
    archive = tmp_path / "snap.zip"
    call_command(
        "export_snapshot", "--project", "PickCube", "--val-split", "0.34", "--no-trend", "--archive", str(archive)
    )
    snapshot = DatasetSnapshot.objects.get(project=labeled_project)
    assert snapshot.number == 1 and snapshot.options["val_split"] == 0.34
    assert any(name.endswith("val.pt") for name in zipfile.ZipFile(archive).namelist())
    call_command(
        "train",
        "--project",
        "PickCube",
        "--snapshot",
        "1",
        "--inline",
        "--epochs",
        "1",
        "--image-size",
        "32",
        "--hidden-dim",
        "8",
        "--warmup-steps",
        "0",
        "--num-threads",
        "1",
    )
    model = TrainedModel.objects.get(project=labeled_project)
    assert model.config["image_size"] == [3, 32, 32] and model.config["epochs"] == 1
    assert "model " in capsys.readouterr().out
    with pytest.raises(CommandError, match="no snapshot #7"):
        call_command("train", "--project", "PickCube", "--snapshot", "7")
    with pytest.raises(CommandError, match="batch_size"):
        call_command("train", "--project", "PickCube", "--snapshot", "1", "--batch-size", "0")
