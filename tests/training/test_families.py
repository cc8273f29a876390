"""The model family registry (`training.families`): every kind has all its parts, and jobs, inference
workers and pages reach a family only through it."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from django.core.files.storage import default_storage
from django.urls import reverse

from tests.conftest import ROOT
from tests.inference.conftest import deploy, direct_probabilities, make_trained_model, random_images
from training.families import FAMILIES, UnknownKind, family, scorer_load, validate_config
from training.kit.family_parts import ModelSpec, RunResult
from training.models import ModelKind, TrainedModel
from training.services import job_create, job_execute
from training.snapshots.services import snapshot_create


def test_every_model_kind_has_one_family_with_all_its_parts():
    assert set(FAMILIES) == set(ModelKind.values)
    for kind, fam in FAMILIES.items():
        assert fam.kind == kind and family(kind) is fam
        defaults = fam.config_class().to_dict()
        json.dumps(defaults)  # a job stores its config as JSON
        with pytest.raises(ValueError, match="no_such_field"):
            fam.config_class.from_dict({"no_such_field": 1})
        assert list(inspect.signature(fam.trainer).parameters) == ["job", "reporter"], kind
        # a scorer loader: imports the family's scorer (and torch) only when a worker loads a model
        loader = inspect.signature(fam.scorer)
        assert list(loader.parameters) == ["spec"] and loader.return_annotation == "Scorer", kind
        assert reverse(fam.evaluation_page, kwargs={"model_id": 7}).startswith("/"), kind
    resnet = FAMILIES["resnet"].config_class
    assert resnet.from_dict(resnet().to_dict()).to_dict() == resnet().to_dict()


def test_an_unknown_kind_is_refused_by_name():
    with pytest.raises(UnknownKind, match="'gpt'.*known: resnet, vlm"):
        family("gpt")
    with pytest.raises(UnknownKind):
        scorer_load(ModelSpec(kind="gpt", folder=Path(default_storage.path("nowhere"))))
    with pytest.raises(ValueError, match="unknown model kind 'gpt'"):
        validate_config("gpt", {})  # what job_create checks a new job's kind and config with


@pytest.mark.django_db
def test_the_inference_worker_loads_a_deployment_through_its_family(project, monkeypatch):
    from inference.management.commands.inference_worker import deployment_scorer

    model = make_trained_model(project, seed=3, bias=1.0)
    deployment = deploy(model)
    images = random_images(4)

    version, scorer = deployment_scorer(deployment.name, "cpu")
    assert version == deployment.version
    assert np.allclose(scorer.score(images), direct_probabilities(model.checkpoint_path, images), atol=1e-6)

    seen: list[ModelSpec] = []

    class Recorder:
        def __init__(self, spec: ModelSpec):
            seen.append(spec)

        def score(self, batch):
            return ["from the registry"] * len(batch)

    monkeypatch.setitem(FAMILIES, "resnet", replace(FAMILIES["resnet"], scorer=Recorder))
    _, scorer = deployment_scorer(deployment.name, "cpu")
    assert scorer.score(images) == ["from the registry"] * 4
    assert seen == [
        ModelSpec(kind="resnet", folder=Path(default_storage.path(model.checkpoint_path)), config={}, device="cpu")
    ]


@pytest.mark.django_db
def test_a_job_is_trained_by_its_familys_trainer(labeled_project, monkeypatch):
    snapshot = snapshot_create(project=labeled_project, options={"val_split": 0.34, "trend": False})
    calls = []

    def trainer(job, reporter):
        calls.append(job.pk)
        reporter.log("the registry's trainer ran")
        return RunResult(checkpoint_path=f"{job.checkpoint_folder}/best", metrics={"val_acc": 0.5}, name="fake")

    monkeypatch.setitem(FAMILIES, "resnet", replace(FAMILIES["resnet"], trainer=trainer))
    job = job_create(project=labeled_project, snapshot=snapshot, config={"epochs": 1}, enqueue=False)
    assert job.config == FAMILIES["resnet"].config_class.from_dict({"epochs": 1}).to_dict()
    assert job_execute(job_id=job.pk) == "succeeded" and calls == [job.pk]
    model = TrainedModel.objects.get(job=job)
    assert model.name == "fake" and model.kind == "resnet" and model.metrics == {"val_acc": 0.5}


@pytest.mark.django_db
def test_the_evaluation_page_of_a_model_is_its_familys(project, user_client, monkeypatch):
    model = make_trained_model(project, seed=1)
    model.kind = "vlm"
    model.save()
    response = user_client.get(f"/models/{model.pk}/evaluation")
    assert response.status_code == 302 and response.url == reverse("vlm-evaluation", kwargs={"model_id": model.pk})

    monkeypatch.setitem(FAMILIES, "vlm", replace(FAMILIES["vlm"], evaluation_page="api-model-evaluation"))
    response = user_client.get(f"/models/{model.pk}/evaluation")
    assert response.url == reverse("api-model-evaluation", kwargs={"model_id": model.pk})


def test_starting_the_apps_loads_no_model_family():
    """The families import torch; app startup (every AppConfig.ready, signal receivers included) must not, so
    a restarted web server listens within seconds and teleop streams reconnect at once."""
    code = "import sys, django; django.setup(); print(sorted({'torch', 'training.families'} & set(sys.modules)))"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_web_process_serves_its_pages_without_torch():
    """Loading the ASGI app and every URL (what a web process does by its first request) imports no torch: a
    web process stays a few hundred MB smaller and its first page does not wait seconds for torch to load.
    Trainers, scorers and file readers import torch when they run (the workers)."""
    code = "import sys, webapp.asgi, webapp.urls; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
