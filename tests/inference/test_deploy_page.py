"""Deploying from the app: the model's metrics beside the settings that apply to its kind, the evaluation
slider's threshold carried over, clear refusals, and managers only."""

from __future__ import annotations

import pytest

from inference.models import Deployment

from .conftest import make_trained_model


@pytest.fixture
def model(project):
    trained = make_trained_model(project, seed=1)
    trained.metrics = {"val_acc": 0.9666666, "val_loss": 0.1234, "epoch": 7}
    trained.save(update_fields=["metrics"])
    return trained


@pytest.mark.django_db
def test_the_deploy_form_carries_the_threshold_and_shows_only_what_applies_to_a_resnet(model, user_client):
    page = user_client.get(f"/models/{model.pk}/deploy?threshold=0.42")
    assert page.status_code == 200
    html = page.content.decode()
    form = page.context["form"]
    assert form.initial["threshold"] == 0.42 and form.initial["name"] == "tiny-1-00"  # from the name tiny-1-0.0
    assert [value for value, _ in form.fields["reward_mode"].choices] == ["per_step", "terminal"]
    assert "history_size" not in form.fields and 'name="history_size"' not in html
    assert '<details id="deploy-advanced">' in html and 'name="max_batch_size"' in html  # folded, not gone
    assert "<b>0.967</b> <span>val acc</span>" in html and "0.9666666" not in html  # not "0.967val_acc"
    assert "styles/training.css" in html  # the metrics' layout
    # a threshold outside [0, 1] or not a number is not carried
    assert user_client.get(f"/models/{model.pk}/deploy?threshold=7").context["form"].initial["threshold"] == 0.5


@pytest.mark.django_db
def test_deploying_creates_the_deployment_and_a_taken_name_is_refused_with_the_reason(model, user_client):
    fields = {
        "name": "pick-cube",
        "threshold": "0.42",
        "reward_type": "soft",
        "success_reward": "1.0",
        "fail_reward": "0.0",
        "reward_mode": "per_step",
        "env_reward_weight": "0",
        "reward_weight": "1",
        "gt_success_bonus": "0",
        "max_batch_size": "64",
        "max_wait_ms": "2",
        "sample_every": "10",
    }
    response = user_client.post(f"/models/{model.pk}/deploy", fields)
    assert response.status_code == 302 and response["Location"] == "/deployments/"
    deployment = Deployment.objects.get(name="pick-cube")
    assert deployment.trained_model == model and deployment.threshold == 0.42 and deployment.reward_type == "soft"
    assert deployment.sample_every == 10 and deployment.project == model.project
    assert b"deployed as pick-cube" in user_client.get("/deployments/").content

    again = user_client.post(f"/models/{model.pk}/deploy", fields)
    assert again.status_code == 400 and Deployment.objects.filter(name="pick-cube").count() == 1
    assert b"pick-cube" in again.content and (b"already exists" in again.content or b"taken" in again.content)
    bad = user_client.post(f"/models/{model.pk}/deploy", {**fields, "name": "other", "threshold": "1.5"})
    assert bad.status_code == 400 and not Deployment.objects.filter(name="other").exists()


@pytest.mark.django_db
def test_only_managers_of_the_project_may_deploy(model, project, member_client):
    annotator = member_client(project, "annotator")
    assert annotator.get(f"/models/{model.pk}/deploy").status_code in (403, 404)
    assert annotator.post(f"/models/{model.pk}/deploy", {"name": "x"}).status_code in (403, 404)
    assert not Deployment.objects.exists()
    assert member_client(project, "manager").get(f"/models/{model.pk}/deploy").status_code == 200
