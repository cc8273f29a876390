"""Deployments managed in the app and over the API: switching to another model (v1, v2, ...), editing the reward
settings with bounds, pausing (clients hear that it is paused), deleting after a confirmation, each change in the
history with who made it; deploying again under a taken name offers the switch."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rest_framework.test import APIClient

from inference.models import Deployment, DeploymentEvent

from .conftest import make_trained_model, random_images

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_limiter(clear_rate_limits):
    yield


@pytest.fixture
def api(user) -> APIClient:
    client = APIClient()
    client.force_login(user)  # alice, the project's manager
    return client


@pytest.fixture
def models(project):
    return make_trained_model(project, seed=1), make_trained_model(project, seed=2)


@pytest.fixture
def deployment(models):
    return _named(models[0], "pick-cube")


def _named(model, name: str) -> Deployment:
    from inference.services import deployment_create

    return deployment_create(name=name, trained_model=model, reward_type="binary", actor="setup")


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_switching_over_the_api_reads_v2_and_the_history_says_who_switched_from_what(api, deployment, models):
    first = api.get("/api/deployments/pick-cube/").json()
    assert first["version_label"] == "v1" and first["revision"] == 1 and first["paused"] is False
    switched = api.post("/api/deployments/pick-cube/model", {"trained_model": models[1].pk}, format="json")
    assert switched.status_code == 200, switched.json()
    body = switched.json()
    assert body["version_label"] == "v2" and body["trained_model"] == models[1].pk and body["status"] == "loading"
    assert body["version"] > first["version"]  # the workers' reload key still grows
    history = api.get("/api/deployments/pick-cube/history").json()
    assert [e["action"] for e in history] == ["switched", "created"]
    assert history[0]["actor"] == "alice" and history[0]["revision"] == 2
    assert history[0]["detail"]["from"]["id"] == models[0].pk and history[0]["detail"]["to"]["id"] == models[1].pk
    assert history[1]["actor"] == "setup"


def test_settings_edited_over_the_api_are_recorded_and_out_of_bounds_values_refused_with_the_reason(api, deployment):
    changed = api.patch("/api/deployments/pick-cube/", {"reward_weight": 2.5, "threshold": 0.7}, format="json")
    assert changed.status_code == 200 and changed.json()["reward_weight"] == 2.5
    assert changed.json()["version_label"] == "v1"  # settings are not a new version of the served model
    event = DeploymentEvent.objects.get(deployment=deployment, action="settings")
    assert event.actor == "alice" and event.detail == {"reward_weight": [1.0, 2.5], "threshold": [0.5, 0.7]}
    refused = api.patch("/api/deployments/pick-cube/", {"reward_weight": 3e63}, format="json")
    assert refused.status_code == 400 and "reward_weight must be between -1000 and 1000" in refused.json()["detail"]
    assert DeploymentEvent.objects.filter(action="settings").count() == 1  # nothing stored for the refused one


def test_a_paused_deployment_answers_503_saying_so_and_answers_again_when_resumed(api, agent_client, deployment):
    body = npy(random_images(2))
    paused = api.post("/api/deployments/pick-cube/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    refused = agent_client.post("/api/deployments/pick-cube/rewards", data=body, content_type="application/x-npy")
    assert refused.status_code == 503 and "is paused" in refused.json()["detail"]
    assert "Retry-After" not in refused  # not worth retrying: a person resumes it
    assert api.post("/api/deployments/pick-cube/pause").status_code == 200  # again: no second event
    resumed = api.post("/api/deployments/pick-cube/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    actions = list(DeploymentEvent.objects.filter(deployment=deployment).values_list("action", flat=True))
    assert actions == ["resumed", "paused", "created"]


def test_deleting_over_the_api_answers_404_to_clients_and_keeps_the_history(api, agent_client, deployment):
    assert api.delete("/api/deployments/pick-cube/").status_code == 204
    assert not Deployment.objects.filter(name="pick-cube").exists()
    gone = agent_client.post(
        "/api/deployments/pick-cube/rewards", data=npy(random_images(1)), content_type="application/x-npy"
    )
    assert gone.status_code == 404
    kept = DeploymentEvent.objects.filter(deployment_name="pick-cube").order_by("pk")
    assert [(e.action, e.actor, e.deployment_id) for e in kept] == [
        ("created", "setup", None),
        ("deleted", "alice", None),
    ]


def test_only_managers_pause_delete_and_read_the_history_as_viewers(
    deployment, project, member_client, scoped_agent_client
):
    annotator = member_client(project, "annotator")
    assert annotator.post("/api/deployments/pick-cube/pause").status_code == 403
    assert annotator.delete("/api/deployments/pick-cube/").status_code == 403
    assert annotator.get("/api/deployments/pick-cube/history").status_code == 200
    assert annotator.post("/deployments/pick-cube/pause", {"paused": "1"}).status_code == 403
    _, token_client = scoped_agent_client(["rewards", "training"], projects=[project])
    assert token_client.post("/api/deployments/pick-cube/pause").status_code == 403
    assert token_client.delete("/api/deployments/pick-cube/").status_code == 403
    deployment.refresh_from_db()
    assert not deployment.paused


def test_the_schema_lists_the_new_routes(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    ids = {op["operationId"] for path in schema["paths"].values() for op in path.values() if isinstance(op, dict)}
    assert {"deployment_pause", "deployment_resume", "deployment_delete", "deployment_history"} <= ids


def test_the_deployment_page_switches_edits_pauses_and_shows_who_did_what(user_client, deployment, models):
    page = user_client.get("/deployments/pick-cube/")
    html = page.content.decode()
    assert page.status_code == 200 and "v1" in html and f'value="{models[1].pk}"' in html
    assert f'value="{models[0].pk}"' not in html  # the served model is not offered
    switched = user_client.post("/deployments/pick-cube/switch", {"model": models[1].pk})
    assert switched.status_code == 302
    deployment.refresh_from_db()
    assert deployment.trained_model == models[1] and deployment.version_label == "v2"
    form = {
        "threshold": "0.6",
        "reward_type": "binary",
        "success_reward": "1",
        "fail_reward": "-1",
        "reward_mode": "per_step",
        "ood_action": "flag",
        "env_reward_weight": "0",
        "reward_weight": "1",
        "gt_success_bonus": "0",
        "max_batch_size": "64",
        "max_wait_ms": "2",
        "sample_every": "0",
        "inference_precision": "fp32",
    }
    bad = user_client.post("/deployments/pick-cube/settings", {**form, "fail_reward": "3e63"})
    assert bad.status_code == 400 and "fail_reward must be between" in bad.content.decode()
    saved = user_client.post("/deployments/pick-cube/settings", form)
    assert saved.status_code == 302
    deployment.refresh_from_db()
    assert deployment.fail_reward == -1.0 and deployment.threshold == 0.6
    assert user_client.post("/deployments/pick-cube/pause", {"paused": "1"}).status_code == 302
    html = user_client.get("/deployments/pick-cube/").content.decode()
    assert 'id="deployment-paused"' in html and 'id="resume-button"' in html
    history = html.split('id="deployment-history"')[1]
    assert "Paused" in history and "fail_reward 0.0 → -1.0" in history and "tiny-1-0.0 → tiny-2-0.0" in history
    assert history.count("<td>alice</td>") == 3
    listing = user_client.get("/deployments/").content.decode()
    assert (
        "v2" in listing
        and "/deployments/pick-cube/" in listing
        and str(deployment.version) not in listing.split("<tbody>")[1].split("title=")[0]
    )


def test_a_switch_to_a_model_of_another_project_or_kind_is_refused(user_client, deployment, project):
    from projects.models import Project
    from training.models import TrainedModel

    other = make_trained_model(Project.objects.create(name="Other"), seed=3)
    vlm = TrainedModel.objects.create(project=project, kind="vlm", name="trend", checkpoint_path="x", config={})
    for model in (other, vlm):
        user_client.post("/deployments/pick-cube/switch", {"model": model.pk})
    deployment.refresh_from_db()
    assert deployment.revision == 1 and not DeploymentEvent.objects.filter(action="switched").exists()


def test_deleting_from_the_page_asks_for_the_name_first(user_client, deployment):
    confirm = user_client.get("/deployments/pick-cube/delete")
    assert confirm.status_code == 200 and b"Type <b>pick-cube</b> to confirm" in confirm.content
    wrong = user_client.post("/deployments/pick-cube/delete", {"confirm_name": "pick"})
    assert wrong.status_code == 400 and Deployment.objects.filter(name="pick-cube").exists()
    done = user_client.post("/deployments/pick-cube/delete", {"confirm_name": "pick-cube"})
    assert done.status_code == 302 and done["Location"] == "/deployments/"
    assert not Deployment.objects.filter(name="pick-cube").exists()


def test_deploying_again_under_a_taken_name_offers_to_switch_that_deployment(user_client, deployment, models):
    fields = {"name": "pick-cube", "threshold": "0.5", "reward_type": "soft", "success_reward": "1", "fail_reward": "0"}
    fields |= {"reward_mode": "per_step", "env_reward_weight": "0", "reward_weight": "1", "gt_success_bonus": "0"}
    fields |= {"max_batch_size": "64", "max_wait_ms": "2", "sample_every": "0"}
    again = user_client.post(f"/models/{models[1].pk}/deploy", fields)
    html = again.content.decode()
    assert again.status_code == 400 and 'id="deploy-taken"' in html
    assert "Deployment with this Name already exists" not in html
    assert "pick-cube already exists (serving tiny-1-0.0, v1)" in html
    assert 'action="/deployments/pick-cube/switch"' in html and f'name="model" value="{models[1].pk}"' in html


def test_the_new_models_evaluation_page_offers_to_switch_the_projects_deployments(user_client, deployment, models):
    html = user_client.get(f"/models/{models[1].pk}/evaluation").content.decode()
    assert 'id="switch-offer"' in html and "Switch pick-cube to this model" in html
    served = user_client.get(f"/models/{models[0].pk}/evaluation").content.decode()
    assert 'id="switch-offer"' not in served  # the model it already serves offers nothing


@pytest.mark.django_db(transaction=True)
def test_deleting_removes_the_served_frames_files_once_the_delete_is_committed(project):
    from django.core.files.storage import default_storage
    from django.db import transaction

    from inference.services import deployment_delete, served_frame_create

    deployment = _named(make_trained_model(project, seed=1), "frames")
    frame = served_frame_create(
        deployment_id=deployment.pk, image=random_images(1)[0], probability=0.5, success=False, model_version=1
    )
    assert default_storage.exists(frame.image.name)
    with transaction.atomic():  # rolled back: the files stay with the rows
        deployment_delete(deployment=Deployment.objects.get(pk=deployment.pk), actor="test")
        transaction.set_rollback(True)
    assert default_storage.exists(frame.image.name) and Deployment.objects.filter(name="frames").exists()
    deployment_delete(deployment=Deployment.objects.get(pk=deployment.pk), actor="test")
    assert not default_storage.exists(frame.image.name)
    event = DeploymentEvent.objects.get(deployment_name="frames", action="deleted")
    assert event.detail["served_frames"] == 1 and event.deployment is None


def test_a_token_that_switches_the_model_is_named_in_the_history(deployment, models, project, scoped_agent_client):
    agent, client = scoped_agent_client(["training"], projects=[project])
    switched = client.post("/api/deployments/pick-cube/model", {"trained_model": models[1].pk}, format="json")
    assert switched.status_code == 200 and switched.json()["version_label"] == "v2"
    event = DeploymentEvent.objects.get(deployment=deployment, action="switched")
    assert event.actor == f"token {agent.name}" and event.user is None


def test_creating_under_a_taken_name_over_the_api_says_how_to_switch_it(api, deployment, models):
    again = api.post("/api/deployments/", {"name": "pick-cube", "trained_model": models[1].pk}, format="json")
    assert again.status_code == 400
    detail = again.json()["detail"]
    assert "pick-cube already exists (serving tiny-1-0.0, v1)" in detail
    assert f'POST /api/deployments/pick-cube/model {{"trained_model": {models[1].pk}}}' in detail
