"""The bench-only instant model (`training/instant`): deployable like any model in a bench's processes
(BENCH_MODELS=1), refused everywhere else, and never offered to users."""

from __future__ import annotations

import numpy as np
import pytest
from django.contrib import admin
from django.core.exceptions import ValidationError

from inference.management.commands.inference_worker import deployment_scorer
from tests.inference.conftest import deploy
from training.families import FAMILIES, BenchOnlyKind
from training.instant.scorer import KIND, instant_probabilities
from training.models import ModelKind, TrainedModel


def instant_model(project) -> TrainedModel:
    return TrainedModel.objects.create(project=project, kind=KIND, name="bench-instant", checkpoint_path="bench")


@pytest.mark.django_db
def test_a_process_without_bench_models_refuses_to_serve_the_instant_model(project, settings):
    settings.BENCH_MODELS = False
    deployment = deploy(instant_model(project))
    with pytest.raises(BenchOnlyKind, match="'instant' serves benches only.*BENCH_MODELS=1"):
        deployment_scorer(deployment.name, "cpu")


@pytest.mark.django_db
def test_a_bench_process_serves_the_first_pixel_of_each_image(project, settings):
    settings.BENCH_MODELS = True
    deployment = deploy(instant_model(project))
    version, scorer = deployment_scorer(deployment.name, "cpu")
    images = np.random.default_rng(0).integers(0, 256, size=(5, 16, 16, 3), dtype=np.uint8)
    images.flags.writeable = False  # a view of received bytes, as the worker hands it over
    assert version == deployment.version
    expected = (images[:, 0, 0, 0].astype(np.float32) / np.float32(255)).tolist()
    assert scorer.score(images) == expected and instant_probabilities(images) == expected
    with pytest.raises(ValueError, match="uint8 \\[B,H,W,3\\]"):
        scorer.score(images[..., 0])


@pytest.mark.django_db
def test_users_are_never_offered_the_instant_kind(project, user_client, admin_user, rf):
    assert KIND not in ModelKind.values and KIND not in FAMILIES  # no page, job form or evaluation lists it
    with pytest.raises(ValidationError, match="kind"):
        TrainedModel(project=project, kind=KIND, name="x", checkpoint_path="x").full_clean()  # admin and forms
    request = rf.get("/admin/")
    request.user = admin_user
    form = admin.site._registry[TrainedModel].get_form(request)
    assert KIND not in [value for value, _ in form.base_fields["kind"].choices]
    response = user_client.post(f"/api/projects/{project.pk}/jobs", {"snapshot": 1, "kind": KIND}, format="json")
    assert response.status_code == 400 and "kind" in response.json()["errors"]
