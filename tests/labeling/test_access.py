"""Access rules finer than the matrix: others' labels, token grants by deployment, the fast path, the
create_agent flags, members managed on the project page, media through the permission-checked view."""

from __future__ import annotations

import io
import uuid

import numpy as np
import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command
from django.test import override_settings

from labeling.ingest.services import StepInput, episode_create, steps_append
from labeling.models import FrameLabel
from projects.models import Agent, Membership
from projects.services import agent_create


@pytest.fixture
def episode(project, agent_token):
    episode, _ = episode_create(project=project, uuid=uuid.uuid4(), agent=agent_token[0])
    steps_append(episode=episode, steps=[StepInput(index=i) for i in range(3)])
    return episode


def test_annotators_change_only_their_own_labels_reviewers_anyones(project, episode, member_client):
    url = f"/api/episodes/{episode.uuid}/frame-labels"
    ann, rev, manager = (member_client(project, role) for role in ("annotator", "reviewer", "manager"))
    assert ann.put(url, {"start": 0, "value": "success"}, "application/json").status_code == 200
    assert ann.put(url, {"start": 0, "value": "fail"}, "application/json").status_code == 200  # her own
    assert rev.put(url, {"start": 1, "value": "fail"}, "application/json").status_code == 200
    refused = ann.put(url, {"start": 0, "end": 1, "value": "success"}, "application/json")
    assert refused.status_code == 403 and "reviewer role" in refused.json()["detail"]
    assert FrameLabel.objects.get(step__index=1, episode=episode).value == "fail"  # nothing half-written
    assert manager.put(url, {"start": 0, "end": 1, "value": "success"}, "application/json").status_code == 200


def test_agents_see_only_named_deployments_and_need_the_rewards_scope(project, trained_model_row):
    from rest_framework.test import APIClient

    from inference.models import Deployment

    mine = Deployment.objects.create(name="mine", trained_model=trained_model_row, project=None)
    theirs = Deployment.objects.create(name="theirs", trained_model=trained_model_row, project=None)

    def client(**grants):
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_create(name=uuid.uuid4().hex, **grants)[1]}")
        return api

    rl = client(kind="rl_worker", deployments=[mine])
    assert [d["name"] for d in rl.get("/api/deployments/").json()] == ["mine"]
    assert rl.post("/api/deployments/mine/rewards", {}, format="json").status_code == 400  # let in, body judged
    assert rl.post("/api/deployments/theirs/rewards", {}, format="json").status_code == 404
    no_scope = client(kind="sim", deployments=[mine, theirs])
    response = no_scope.post("/api/deployments/mine/rewards", {}, format="json")
    assert response.status_code == 403 and "'rewards' scope" in response.json()["detail"]


@pytest.fixture
def trained_model_row(project):
    from training.models import TrainedModel

    return TrainedModel.objects.create(project=project, name="m", checkpoint_path="checkpoints/none")


@pytest.mark.django_db(transaction=True)
def test_the_npy_fast_path_checks_scopes_and_grants_too(project, trained_model_row):
    from inference.fastpath import RewardsFastPath
    from inference.models import Deployment

    deployment = Deployment.objects.create(name="fast", trained_model=trained_model_row, project=project)
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((1, 8, 8, 3), np.float32))

    async def fallback(scope, receive, send):
        raise AssertionError("the fast path should answer")

    async def ask(token: str) -> int:
        scope = {
            "type": "http",
            "method": "POST",
            "path": f"/api/deployments/{deployment.name}/rewards",
            "query_string": b"",
            "headers": [(b"content-type", b"application/x-npy"), (b"authorization", f"Bearer {token}".encode())],
            "client": ("127.0.0.2", 1),
        }
        sent = []

        async def receive():
            return {"type": "http.request", "body": buffer.getvalue(), "more_body": False}

        async def send(message):
            sent.append(message)

        await RewardsFastPath(fallback)(scope, receive, send)
        return sent[0]["status"]

    rewards_here = agent_create(name="a", kind="rl_worker", projects=[project])[1]
    rewards_elsewhere = agent_create(name="b", kind="rl_worker")[1]
    ingest_here = agent_create(name="c", kind="sim", projects=[project])[1]
    assert async_to_sync(ask)(rewards_here) == 400  # let in: the float32 body is refused
    assert async_to_sync(ask)(rewards_elsewhere) == 404
    assert async_to_sync(ask)(ingest_here) == 403


def test_create_agent_flags_set_scopes_projects_and_deployments(project, trained_model_row, capsys):
    from inference.models import Deployment

    Deployment.objects.create(name="dep", trained_model=trained_model_row)
    call_command("create_agent", "rl-1", "--kind", "rl_worker")
    call_command("create_agent", "rl-2", "--kind", "rl_worker", "--deployment", "dep")
    call_command("create_agent", "bot", "--scope", "ingest", "--scope", "labels", "--project", project.name)
    call_command("create_agent", "ops", "--scope", "all", "--project", "all")
    agents = {a.name: a for a in Agent.objects.all()}
    assert (agents["rl-1"].scopes, agents["rl-1"].all_projects, agents["rl-1"].projects.count()) == (
        ["rewards"],
        False,
        0,
    )
    assert [d.name for d in agents["rl-2"].deployments.all()] == ["dep"]
    assert agents["bot"].scopes == ["ingest", "labels"] and list(agents["bot"].projects.all()) == [project]
    assert agents["ops"].all_projects and len(agents["ops"].scopes) == 5
    assert capsys.readouterr().out.count("rs_") == 4  # each token printed once
    with pytest.raises(CommandError, match="no deployment named 'nope'"):
        call_command("create_agent", "rl-3", "--deployment", "dep", "--deployment", "nope")
    assert not Agent.objects.filter(name="rl-3").exists()


def test_managers_manage_members_on_the_project_page(project, user_client, member_client, django_user_model):
    bob = django_user_model.objects.create_user("bob", password="pw-bob-123")
    url = f"/projects/{project.pk}/members/"
    assert user_client.post(url, {"username": "bob", "role": "reviewer"}).status_code == 302
    assert Membership.objects.get(project=project, user=bob).role == "reviewer"
    form = f'action="/projects/{project.pk}/members/"'
    page = user_client.get(f"/projects/{project.pk}/").content.decode()
    assert "bob" in page and form in page
    reviewer_page = member_client(project, "reviewer").get(f"/projects/{project.pk}/").content.decode()
    assert form not in reviewer_page
    assert user_client.post(url, {"username": "bob", "role": "remove"}).status_code == 302
    assert not Membership.objects.filter(user=bob).exists()
    assert user_client.post(url, {"username": "alice", "role": "annotator"}).status_code == 302
    assert Membership.objects.get(project=project, user__username="alice").role == "manager"  # not demoted


def test_media_goes_through_the_permission_check_and_can_hand_off_to_nginx(project, user_client, member_client):
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    name = default_storage.save(f"frames/{project.pk}/x/000000_main.png", ContentFile(b"png"))
    assert user_client.get(f"/media/{name}").content == b"png"
    with override_settings(MEDIA_ACCEL_REDIRECT="/protected-media/"):
        response = user_client.get(f"/media/{name}")
    assert response["X-Accel-Redirect"] == f"/protected-media/{name}" and response.content == b""
    orphan = default_storage.save("checkpoints/imported/model.pt", ContentFile(b"w"))
    assert user_client.get(f"/media/{orphan}").status_code == 404  # no project: site admins only
