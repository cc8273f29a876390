"""The ASGI fast path (in front of Django in `webapp.asgi`) answers like the DRF view, and passes the rest on."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import requests

from reward_client import BadRequestError, NotFoundError, RewardClient

from .conftest import deploy, direct_probabilities, make_trained_model, random_images

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def fast_server_url(live_server_url):
    return live_server_url


@pytest.fixture
def token(db):
    from projects.services import agent_create

    return agent_create(name="rl-fast", kind="rl_worker", all_projects=True)[1]


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_fast_path_serves_the_checkpoint_and_the_reward_modes(
    project, token, fast_server_url, inference_worker_process
):
    model = make_trained_model(project, seed=31)
    images = random_images(4, seed=31)
    p = direct_probabilities(model.checkpoint_path, images)

    per_step = deploy(model, reward_type="soft", env_reward_weight=1.0)
    result = RewardClient(fast_server_url, token, per_step.name).compute_rewards(images, env_rewards=[1, 2, 3, 4])
    np.testing.assert_allclose(result.probabilities, p, atol=1e-5)
    np.testing.assert_allclose(result.rewards, np.array([1, 2, 3, 4]) + p, atol=1e-5)

    terminal = deploy(model, reward_mode="terminal", threshold=0.0)
    result = RewardClient(fast_server_url, token, terminal.name).compute_rewards(images, dones=[0, 1, 0, 0])
    assert result.scored.tolist() == [False, True, False, False]
    np.testing.assert_allclose(result.probabilities[1], p[1], atol=1e-5)
    assert result.rewards.tolist() == [0.0, 1.0, 0.0, 0.0]

    history = deploy(model, reward_mode="history_buffer", history_size=2, min_history_size=2, input_interval=1)
    client = RewardClient(fast_server_url, token, history.name)
    assert [client.compute_rewards(images[:1]).scored[0] for _ in range(3)] == [False, True, True]


def test_fast_path_errors_match_the_api(project, token, fast_server_url):
    deployment = deploy(make_trained_model(project, seed=32))
    url = f"{fast_server_url}/api/deployments/{deployment.name}/rewards"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-npy"}

    def post(body, **extra):
        return requests.post(url, data=body, headers={**headers, **extra}, timeout=30)

    assert "must be uint8, got float32" in post(npy(np.zeros((1, 8, 8, 3), np.float32))).json()["detail"]
    assert "empty batch" in post(npy(np.zeros((0, 8, 8, 3), np.uint8))).json()["detail"]
    assert "shape [B,H,W,3]" in post(npy(np.zeros((2, 8, 8), np.uint8))).json()["detail"]
    response = post(npy(random_images(2)), **{"X-Env-Rewards": "1"})
    assert response.status_code == 400 and "env_rewards has 1 values for 2 images" in response.json()["detail"]
    response = post(npy(random_images(1)), Authorization="Bearer rs_wrong")
    assert response.status_code == 401 and "Unknown or revoked" in response.json()["detail"]
    with pytest.raises(NotFoundError, match="no deployment named 'nope'"):
        RewardClient(fast_server_url, token, "nope").compute_rewards(random_images(1))
    anonymous = requests.post(
        url, data=npy(random_images(1)), headers={"Content-Type": "application/x-npy"}, timeout=30
    )
    assert anonymous.status_code == 401 and "credentials were not provided" in anonymous.json()["detail"]  # Django's
    # JSON bodies and other URLs go to Django as before
    assert (
        requests.post(url, json={"images": []}, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        .json()["detail"]
        .startswith("empty batch")
    )
    assert requests.get(f"{fast_server_url}/healthz", timeout=30).json()["database"] == {"ok": True}


def test_fast_path_throttles_a_flooding_client(project, token, fast_server_url):
    deployment = deploy(make_trained_model(project, seed=33))
    client = RewardClient(fast_server_url, token, deployment.name)
    bad = np.zeros((1, 8, 8, 3), np.float32).astype(np.uint8)[:0]  # empty batch: a 400 every time
    codes = []
    for _ in range(35):
        try:
            client.compute_rewards(bad)
        except BadRequestError as exc:
            codes.append(exc.status)
    assert codes[:30] == [400] * 30 and set(codes[30:]) == {429}


def test_fast_path_samples_served_frames(project, token, fast_server_url, inference_worker_process):
    from inference.models import ServedFrame

    deployment = deploy(make_trained_model(project, seed=34), sample_every=1)
    RewardClient(fast_server_url, token, deployment.name).compute_rewards(random_images(2, seed=34))
    deadline = time.monotonic() + 30
    while ServedFrame.objects.filter(deployment=deployment).count() < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ServedFrame.objects.filter(deployment=deployment).count() == 2
