"""Every preset of the job form makes a model whose files RLinf 0.3.0's own `ResNetRewardModel` either scores
exactly as we serve it, or that the app flags as not reproducible by RLinf, and the app says which
(training.resnet.rlinf_match): RLinf's class loads `model.safetensors` strictly and scores the validation frames
in the side environment, with the `reward.model` block the model's download carries."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
import yaml

from training.storage import local_path

from ..training.conftest import seed_episodes
from .conftest import side_run

SIZE = 32
TOLERANCE = 1e-5  # float32 convolutions under the torch of two environments
SMALL = {"epochs": 1, "batch_size": 16, "warmup_steps": 0, "num_threads": 1, "hidden_dim": 16}
# what `manage.py demo` trains its teleop model with: the workspace crop
CROPPED = {"crop": "0.2, 0.25, 0.5, 0.5"}


def form_values(form) -> dict:
    return {name: form.initial.get(name, field.initial) for name, field in form.fields.items()}


def preset_job_config(project, snapshot, initial: dict) -> dict:
    """The job form's config for a preset's values (as the training page's preset link fills the form)."""
    from training.forms import JobForm

    data = form_values(JobForm(project=project, initial=initial)) | initial | SMALL | {"snapshot": snapshot.pk}
    form = JobForm({k: v for k, v in data.items() if v is not None}, project=project)
    assert form.is_valid(), form.errors.as_text()
    return form.config()


@pytest.fixture
def snapshot(project):
    from training.snapshots.services import snapshot_create

    seed_episodes(project, episodes=6, steps=10, size=SIZE, windows=False)
    built = snapshot_create(project=project, options={"val_split": 0.34, "trend": False, "png_folders": False})
    assert built.status == "ready", built.error
    return built


def assert_download_says_so(client, model, *, equal: bool) -> None:
    """The model's download holds its checkpoint with RLinf's `reward.model` block that loads it, or a note why
    RLinf's class would not reproduce it."""
    response = client.get(f"/models/{model.pk}/download")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    root = archive.namelist()[0].split("/", 1)[0]
    names = {name.split("/", 1)[1] for name in archive.namelist()}
    assert {"model.safetensors", "config.json", "RLINF.md", "rlinf_reward_model.yaml"} <= names
    note = archive.read(f"{root}/RLINF.md").decode()
    config = yaml.safe_load(archive.read(f"{root}/rlinf_reward_model.yaml"))
    if equal:
        block = config["reward"]["model"]
        assert block["model_type"] == "resnet" and block["pretrained"] is False
        assert block["image_size"] == model.config["image_size"] and block["model_path"].endswith(".safetensors")
    else:
        assert config is None and "NOT REPRODUCIBLE" in note and "crop" in note


def served_and_rlinf(model, snapshot) -> tuple[np.ndarray, np.ndarray]:
    from training.evaluation.model_evaluation import model_predictions
    from training.resnet.config import ResNetConfig
    from training.resnet.rlinf_match import rlinf_reward_model_config

    folder = local_path(model.checkpoint_path)
    block = rlinf_reward_model_config(ResNetConfig.from_dict(model.config), "")
    block = {k: v for k, v in block.items() if k not in ("model_path", "model_type")}
    data = local_path(snapshot.folder)
    theirs = side_run(
        "resnet_files",
        payloads={"val": data / "val.pt"},
        weights={"safetensors": folder / "model.safetensors"},
        model=block,
    )
    served, _ = model_predictions(model=model, snapshot=snapshot)
    return served, np.asarray(theirs["probabilities"]["safetensors"])


@pytest.mark.django_db
def test_each_preset_is_reproduced_by_rlinfs_class_or_flagged_so_and_the_tour_preset_is_reproduced(
    project, snapshot, user_client
):
    from training.models import TrainedModel
    from training.presets import PRESETS
    from training.services import job_create, job_execute

    cases = {name: preset.form_initial(SIZE) for name, preset in PRESETS.items()} | {"cropped (demo)": CROPPED}
    verdicts = {}
    for name, initial in cases.items():
        job = job_create(
            project=project, snapshot=snapshot, config=preset_job_config(project, snapshot, initial), enqueue=False
        )
        job_execute(job_id=job.pk)
        model = TrainedModel.objects.get(job=job)
        served, rlinf = served_and_rlinf(model, snapshot)
        assert served.max() - served.min() > 1e-4, f"{name}: a constant scorer would prove nothing"
        difference = float(np.abs(served - rlinf).max())
        match = model.rlinf_match
        assert match is not None
        if match.equal:
            assert difference <= TOLERANCE, f"{name}: the app says RLinf reproduces it, RLinf differs by {difference}"
        else:
            assert difference > 1e-3, f"{name}: flagged ({match.reason}) but RLinf agrees to {difference}"
            assert "crop" in match.reason
        verdicts[name] = match.equal
        page = user_client.get(f"/models/{model.pk}/evaluation").content.decode()
        assert f'data-rlinf="{"equal" if match.equal else "differs"}"' in page
        assert_download_says_so(user_client, model, equal=match.equal)
    assert verdicts["pickcube"], "the tour's preset must make a model RLinf's own class scores as we do"
    assert verdicts["defaults"] and not verdicts["cropped (demo)"]
    assert user_client.get("/models/999999/download").status_code == 404
