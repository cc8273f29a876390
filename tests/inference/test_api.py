"""The rewards endpoint: every kind of bad input gets a clear 4xx before reaching a worker; deployments
API permissions; the bad-request limiter isolates a flooding client."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from rest_framework.test import APIClient

from inference.broker import queue_key
from inference.serving import sync_redis
from projects.gate.throttles import bad_request_limit

from .conftest import deploy, make_trained_model, random_images

pytestmark = pytest.mark.django_db


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.fixture(autouse=True)
def _fresh_limiter(clear_rate_limits):
    yield


@pytest.fixture
def deployment(trained_model):
    return deploy(trained_model)


def post_npy(client, name: str, body: bytes, query: str = ""):
    return client.post(f"/api/deployments/{name}/rewards{query}", data=body, content_type="application/x-npy")


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros((2, 32, 32, 3), np.float32), "must be uint8, got float32"),
        (np.zeros((2, 32, 32), np.uint8), "shape [B,H,W,3]"),
        (np.zeros((2, 32, 32, 4), np.uint8), "shape [B,H,W,3]"),
        (np.zeros((0, 32, 32, 3), np.uint8), "empty batch"),
        (np.zeros((1, 5000, 4, 3), np.uint8), "px a side"),
    ],
)
def test_bad_arrays_get_400_with_the_problem_named_and_never_reach_a_worker(agent_client, deployment, array, message):
    response = post_npy(agent_client, deployment.name, npy(array))
    assert response.status_code == 400
    assert message in response.json()["detail"]
    assert sync_redis().llen(queue_key(deployment.name)) == 0


def test_truncated_and_garbage_bodies_get_400(agent_client, deployment):
    good = npy(random_images(2))
    assert "needs" in post_npy(agent_client, deployment.name, good[:-10]).json()["detail"]
    assert "not a readable .npy" in post_npy(agent_client, deployment.name, b"hello").json()["detail"]
    assert "empty body" in post_npy(agent_client, deployment.name, b"").json()["detail"]


def test_object_arrays_are_refused_without_unpickling(agent_client, deployment):
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    response = post_npy(agent_client, deployment.name, buffer.getvalue())
    assert response.status_code == 400
    assert "uint8" in response.json()["detail"]


def test_flags_must_match_the_batch(agent_client, deployment):
    body = npy(random_images(2))
    response = post_npy(agent_client, deployment.name, body, "?env_rewards=1.0")
    assert response.status_code == 400 and "env_rewards has 1 values for 2 images" in response.json()["detail"]
    response = post_npy(agent_client, deployment.name, body, "?dones=1,maybe")
    assert response.status_code == 400 and "dones must hold booleans" in response.json()["detail"]


def test_unknown_deployment_is_404(agent_client):
    response = post_npy(agent_client, "no-such-deployment", npy(random_images(1)))
    assert response.status_code == 404
    assert "no deployment named 'no-such-deployment'" in response.json()["detail"]


def test_missing_and_wrong_tokens_are_401(deployment):
    anonymous = APIClient()
    response = post_npy(anonymous, deployment.name, npy(random_images(1)))
    assert response.status_code == 401
    assert "credentials were not provided" in response.json()["detail"]
    anonymous.credentials(HTTP_AUTHORIZATION="Bearer rs_not-a-real-token")
    response = post_npy(anonymous, deployment.name, npy(random_images(1)))
    assert response.status_code == 401 and "Unknown or revoked" in response.json()["detail"]


def test_unsupported_content_type_is_415(agent_client, deployment):
    response = agent_client.post(f"/api/deployments/{deployment.name}/rewards", data=b"x", content_type="text/plain")
    assert response.status_code == 415 and "application/x-npy" in response.json()["detail"]


def test_json_body_needs_base64_images(agent_client, deployment):
    url = f"/api/deployments/{deployment.name}/rewards"
    response = agent_client.post(url, {"images": ["not base64!"]}, format="json")
    assert response.status_code == 400 and "images[0]" in response.json()["detail"]
    response = agent_client.post(url, {"images": []}, format="json")
    assert response.status_code == 400 and "empty batch" in response.json()["detail"]
    response = agent_client.post(url, {"pictures": []}, format="json")
    assert response.status_code == 400 and "'images' list" in response.json()["detail"]


def test_a_png_whose_image_data_will_not_inflate_is_a_400_not_a_500(agent_client, deployment):
    from tests.labeling.broken_pngs import broken_png

    url = f"/api/deployments/{deployment.name}/rewards"
    broken = base64.b64encode(broken_png("corrupt stream", 32, 32)).decode()
    response = agent_client.post(url, {"images": [broken]}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["detail"].startswith("images[0]: undecodable image: "), response.json()
    assert sync_redis().llen(queue_key(deployment.name)) == 0


def test_unhealthy_deployment_answers_503_with_its_error(agent_client, deployment):
    from inference.services import deployment_set_health

    deployment_set_health(name=deployment.name, version=None, error="model failed to load: FileNotFoundError: gone")
    from inference.serving import forget_deployment

    forget_deployment(deployment.name)
    response = post_npy(agent_client, deployment.name, npy(random_images(1)))
    assert response.status_code == 503
    assert "is unhealthy: model failed to load: FileNotFoundError: gone" in response.json()["detail"]


def test_a_flooding_client_is_throttled_while_others_are_not(deployment, agent_client):
    from projects.services import agent_create

    _, other_token = agent_create(name="rl-worker-2", kind="rl_worker", all_projects=True)
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_token}")
    bad = npy(np.zeros((1, 8, 8, 3), np.float32))
    limit = bad_request_limit().amount
    responses = [post_npy(agent_client, deployment.name, bad) for _ in range(limit + 5)]
    codes = [r.status_code for r in responses]
    assert codes[:limit] == [400] * limit
    assert set(codes[limit:]) == {429}
    assert int(responses[-1]["Retry-After"]) >= 1 and "too many bad requests" in responses[-1].json()["detail"]
    assert post_npy(other, deployment.name, bad).status_code == 400  # the other client still gets real answers


def test_deployments_list_for_agents_and_changes_for_staff_only(agent_client, admin_user, deployment, trained_model):
    listing = agent_client.get("/api/deployments/")
    assert listing.status_code == 200
    assert [d["name"] for d in listing.json()] == [deployment.name]
    assert listing.json()[0]["status"] == "loading"
    denied = agent_client.patch(f"/api/deployments/{deployment.name}/", {"threshold": 0.7}, format="json")
    assert denied.status_code == 403
    staff = APIClient()
    staff.force_login(admin_user)
    created = staff.post(
        "/api/deployments/", {"name": "second", "trained_model": trained_model.pk, "threshold": 0.8}, format="json"
    )
    assert created.status_code == 201, created.json()
    version = created.json()["version"]
    assert created.json()["threshold"] == 0.8 and version > 1
    assert created.json()["reward_type"] == "soft"  # the probability, as RLinf's stock reward configs give it
    bad = staff.patch("/api/deployments/second/", {"threshold": 3}, format="json")
    assert bad.status_code == 400 and "threshold" in bad.json()["detail"]
    switched = staff.patch(
        "/api/deployments/second/", {"trained_model": trained_model.pk, "reward_type": "soft"}, format="json"
    )
    assert switched.status_code == 200 and switched.json()["version"] == version  # same model: no reload


def test_the_hot_path_makes_no_database_query_once_warm(
    agent_client, deployment, monkeypatch, django_assert_num_queries
):
    import inference.reward_serving as reward_serving

    async def infer_payload(config, payload, timeout=None, client="", shm=None):
        return [0.75]

    monkeypatch.setattr(reward_serving, "infer_payload", infer_payload)
    body = npy(random_images(1))
    assert post_npy(agent_client, deployment.name, body).json()["items"][0]["probability"] == 0.75
    with django_assert_num_queries(0):
        response = post_npy(agent_client, deployment.name, body, "?env_rewards=1.0&dones=0")
    assert response.json()["items"] == [
        {
            "probability": 0.75,
            "success": True,
            "reward": 1.0,
            "scored": True,
            "model_output": 1.0,
            "window": 0,
            "assign_previous": 0,
            "assign_reward": 0.0,
            "ood": None,  # a model without off-distribution statistics (training/resnet/ood.py) says nothing
            "ood_score": None,
        }
    ]


def test_admin_deploys_and_switching_the_model_bumps_the_version(admin_user, client, project, trained_model):
    from inference.models import Deployment

    from .conftest import make_trained_model

    client.force_login(admin_user)
    form = {
        "name": "from-admin",
        "trained_model": trained_model.pk,
        "reward_mode": "per_step",
        "threshold": "0.6",
        "reward_type": "binary",
        "success_reward": "1",
        "fail_reward": "0",
        "env_reward_weight": "0",
        "reward_weight": "1",
        "history_size": "5",
        "min_history_size": "1",
        "input_interval": "1",
        "interval_reward": "0",
        "max_batch_size": "64",
        "max_wait_ms": "2",
        "sample_every": "0",
        "ood_action": "flag",
    }
    assert client.post("/admin/inference/deployment/add/", form).status_code == 302
    deployment = Deployment.objects.get(name="from-admin")
    assert deployment.chat_prompt == "trained"  # left out of the form: the default, not ''
    first_version = deployment.version
    assert deployment.threshold == 0.6 and deployment.project == project
    bad = client.post(f"/admin/inference/deployment/{deployment.pk}/change/", {**form, "min_history_size": "9"})
    assert bad.status_code == 200 and "min_history_size cannot exceed history_size" in bad.content.decode()
    other = make_trained_model(project, seed=1)
    response = client.post(f"/admin/inference/deployment/{deployment.pk}/change/", {**form, "trained_model": other.pk})
    assert response.status_code == 302
    deployment.refresh_from_db()
    assert deployment.trained_model == other and deployment.version > first_version
    assert deployment.status == "loading"
    assert client.get("/admin/inference/deployment/").status_code == 200


def test_old_served_frames_are_pruned_but_labeled_ones_kept(deployment, project):
    import uuid

    from django.core.files.storage import default_storage

    from inference.models import ServedFrame
    from inference.services import served_frame_create, served_frames_prune
    from labeling.ingest.services import episode_create

    frames = [
        served_frame_create(deployment_id=deployment.pk, image=img, probability=0.5, success=False, model_version=1)
        for img in random_images(4)
    ]
    episode, _ = episode_create(project=project, uuid=uuid.uuid4(), source="import")
    ServedFrame.objects.filter(pk=frames[0].pk).update(labeled_episode=episode, label_value="fail")
    assert served_frames_prune(deployment_id=deployment.pk, keep=2) == 1
    assert set(ServedFrame.objects.values_list("pk", flat=True)) == {frames[0].pk, frames[2].pk, frames[3].pk}
    assert not default_storage.exists(frames[1].image.name)
    assert default_storage.exists(frames[0].image.name)


def test_a_vlm_deployment_points_image_requests_to_its_own_endpoint(agent_client, project):
    from training.models import TrainedModel

    vlm = TrainedModel.objects.create(project=project, kind="vlm", name="trend", checkpoint_path="x", config={})
    deployment = deploy(vlm)
    response = post_npy(agent_client, deployment.name, npy(random_images(1)))
    assert response.status_code == 400
    assert f"/api/deployments/{deployment.name}/vlm/rewards" in response.json()["detail"]


def test_a_deployment_made_again_under_the_same_name_never_reuses_a_version(project):
    from inference.models import Deployment
    from inference.services import deployment_create, deployment_update

    model = make_trained_model(project, seed=0)
    first = deployment_create(name="same-name", trained_model=model)
    version = first.version
    first.delete()
    again = deployment_create(name="same-name", trained_model=model)
    assert again.version > version  # a worker still holding `version` loads the new deployment's model
    before_switch = again.version
    switched = deployment_update(deployment=again, trained_model=make_trained_model(project, seed=1))
    assert switched.version > before_switch
    assert Deployment.objects.get(name="same-name").version == switched.version
