"""Name and alias errors reveal nothing across projects: names and aliases are unique site-wide, so a clash
with another project's deployment is refused (400) without naming that deployment."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def hidden(db):
    """A deployment of a project the caller is no member of, with an alias."""
    from inference.models import Deployment
    from projects.models import Project
    from training.models import TrainedModel

    other = Project.objects.create(name="Secret", task_description="x")
    model = TrainedModel.objects.create(project=other, kind="resnet", name="m", checkpoint_path="x.pt", config={})
    return Deployment.objects.create(project=other, trained_model=model, name="secret-arm", aliases=["prod-arm"])


@pytest.fixture
def own_model(project):
    from training.models import TrainedModel

    return TrainedModel.objects.create(project=project, kind="resnet", name="mine", checkpoint_path="y.pt", config={})


def _create(client, model, **body):
    return client.post(
        "/api/deployments/", json.dumps({"trained_model": model.pk, **body}), content_type="application/json"
    )


@pytest.mark.parametrize(
    "body",
    [
        {"name": "prod-arm"},  # my name is their alias
        {"name": "SECRET-ARM"},  # their name, another case
        {"name": "mine", "aliases": ["Secret-Arm"]},  # my alias is their name
        {"name": "mine", "aliases": ["PROD-arm"]},  # my alias is their alias
    ],
)
def test_a_clash_with_another_projects_deployment_names_no_deployment(user_client, own_model, hidden, body):
    response = _create(user_client, own_model, **body)
    assert response.status_code == 400, response.content
    text = response.content.decode().lower()
    assert "is taken" in text
    sent = [body["name"].lower(), *(a.lower() for a in body.get("aliases", []))]
    for identifier in ("secret-arm", "prod-arm"):  # only what the caller sent comes back
        assert identifier in sent or identifier not in text, text


def test_changing_aliases_to_another_projects_name_is_refused_neutrally(user_client, own_model, hidden):
    assert _create(user_client, own_model, name="mine").status_code == 201
    response = user_client.patch(
        "/api/deployments/mine/", json.dumps({"aliases": ["prod-arm"]}), content_type="application/json"
    )
    assert response.status_code == 400
    assert "is taken" in response.content.decode() and "secret-arm" not in response.content.decode()
