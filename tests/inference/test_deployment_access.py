"""GET /api/deployments/<name>/access: what the caller may do, as the endpoints doing it would answer."""

from __future__ import annotations

import pytest

from tests.inference.conftest import deploy, make_trained_model


@pytest.fixture
def deployment(project):
    return deploy(make_trained_model(project, seed=0))


@pytest.mark.django_db
def test_a_token_hears_which_of_its_actions_are_refused_and_why(scoped_agent_client, project, deployment):
    _, client = scoped_agent_client(["rewards", "labels"], projects=[project])

    answer = client.get(f"/api/deployments/{deployment.name}/access")

    assert answer.status_code == 200
    body = answer.json()
    assert body["deployment"] == deployment.name and body["project"] == project.pk
    assert body["allowed"] == {
        "rewards": True,
        "ingest": False,
        "propose_labels": True,
        "train": False,
        "switch_model": False,
    }
    assert body["refused"]["ingest"] == "this token lacks the 'ingest' scope needed to ingest episodes"
    assert body["refused"]["train"] == "this token lacks the 'training' scope needed to make snapshots and train"
    assert set(body["refused"]) == {"ingest", "train", "switch_model"}


@pytest.mark.django_db
def test_the_answer_agrees_with_the_endpoints_themselves(scoped_agent_client, project, deployment):
    _, client = scoped_agent_client(["labels"], projects=[project])

    assert client.get(f"/api/deployments/{deployment.name}/access").json()["allowed"]["rewards"] is False
    assert client.get(f"/api/deployments/{deployment.name}/").status_code == 403  # the rewards scope shows it


@pytest.mark.django_db
def test_a_deployment_the_token_cannot_see_is_not_found(scoped_agent_client, project, deployment):
    from projects.models import Project

    other = Project.objects.create(name="other")
    _, client = scoped_agent_client(["rewards", "ingest"], projects=[other])

    assert client.get(f"/api/deployments/{deployment.name}/access").status_code == 404
    assert client.get("/api/deployments/no-such-deployment/access").status_code == 404


@pytest.mark.django_db
def test_a_trusted_networks_tokenless_caller_hears_rewards_only(client, deployment):
    from django.test import override_settings

    url = f"/api/deployments/{deployment.name}/access"
    with override_settings(TRUSTED_CIDRS=["10.0.0.0/8"]):
        answer = client.get(url, REMOTE_ADDR="10.1.2.3")
        assert answer.status_code == 200
        assert answer.json()["allowed"] == {
            "rewards": True,
            "ingest": False,
            "propose_labels": False,
            "train": False,
            "switch_model": False,
        }
        assert client.get(url, REMOTE_ADDR="127.0.0.1").status_code == 401
