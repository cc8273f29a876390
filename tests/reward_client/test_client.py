"""End to end: a real inference worker process on Redis, the ASGI server, and the Python client."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import time

import numpy as np
import pytest
import requests
from PIL import Image

from reward_client import (
    AuthenticationError,
    BadRequestError,
    ConnectionFailed,
    DIEngineRewardModel,
    NotFoundError,
    RewardClient,
    RLinfRewardModel,
    ServiceUnavailable,
)
from tests.conftest import ROOT
from tests.inference.conftest import deploy, direct_probabilities, make_trained_model, random_images

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def rl_token(db):
    from projects.services import agent_create

    return agent_create(name="rl-worker", kind="rl_worker", all_projects=True)[1]


def test_client_package_needs_neither_django_nor_torch():
    code = "import sys; import reward_client; assert 'django' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_client_gets_the_checkpoint_probabilities_and_rewards(
    project, rl_token, live_server_url, inference_worker_process
):
    model = make_trained_model(project, seed=3)
    deployment = deploy(model, threshold=0.5, success_reward=2.0, fail_reward=-1.0)
    images = random_images(6, seed=1)
    expected = direct_probabilities(model.checkpoint_path, images)

    client = RewardClient(live_server_url, rl_token, deployment=deployment.name)
    result = client.compute_rewards(images)

    np.testing.assert_allclose(result.probabilities, expected, atol=1e-5)
    np.testing.assert_array_equal(result.success, expected > 0.5)
    np.testing.assert_allclose(result.rewards, np.where(expected > 0.5, 2.0, -1.0))
    assert result.scored.all()
    deployment.refresh_from_db()
    assert deployment.status == "healthy"

    # the deployment URL form of the constructor, and a single [H,W,3] image
    single = RewardClient(f"{live_server_url}/api/deployments/{deployment.name}/", rl_token).compute_rewards(images[2])
    np.testing.assert_allclose(single.probabilities, expected[2:3], atol=1e-5)


def test_reward_modes_and_combine_through_the_api(project, rl_token, live_server_url, inference_worker_process):
    model = make_trained_model(project, seed=4)
    images = random_images(4, seed=2)
    p = direct_probabilities(model.checkpoint_path, images).astype(np.float64)
    env = np.array([0.5, -1.0, 2.0, 0.0])

    soft = deploy(model, reward_type="soft", env_reward_weight=0.5, reward_weight=2.0)
    result = RewardClient(live_server_url, rl_token, soft.name).compute_rewards(images, env_rewards=env)
    np.testing.assert_allclose(result.rewards, 0.5 * env + 2.0 * p, atol=1e-5)

    terminal = deploy(model, reward_mode="terminal", env_reward_weight=1.0, reward_weight=10.0, threshold=0.0)
    result = RewardClient(live_server_url, rl_token, terminal.name).compute_rewards(
        images, env_rewards=env, dones=[False, True, False, True]
    )
    assert result.scored.tolist() == [False, True, False, True]
    assert np.isnan(result.probabilities[[0, 2]]).all()
    np.testing.assert_allclose(result.probabilities[[1, 3]], p[[1, 3]], atol=1e-5)
    np.testing.assert_allclose(result.rewards, [0.5, -1.0 + 10.0, 2.0, 0.0 + 10.0], atol=1e-5)

    history = deploy(model, reward_mode="history_buffer", history_size=3, min_history_size=2, input_interval=2)
    client = RewardClient(live_server_url, rl_token, history.name)
    pattern = [client.compute_rewards(images[:2], dones=[False, step == 2]).scored.tolist() for step in range(5)]
    # stream 0: counts 1..5 -> scored at 2 and 4; stream 1 is done at step 2 (count 3, not scored) and restarts
    assert pattern == [[False, False], [True, True], [False, False], [True, False], [False, True]]


def test_json_base64_images_give_the_same_probabilities(project, rl_token, live_server_url, inference_worker_process):
    model = make_trained_model(project, seed=5)
    deployment = deploy(model)
    images = random_images(2, seed=3)
    encoded = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG")
        encoded.append(base64.b64encode(buffer.getvalue()).decode())
    response = requests.post(
        f"{live_server_url}/api/deployments/{deployment.name}/rewards",
        json={"images": encoded, "env_rewards": [0, 0], "dones": [False, True]},
        headers={"Authorization": f"Bearer {rl_token}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    got = [item["probability"] for item in response.json()["items"]]
    np.testing.assert_allclose(got, direct_probabilities(model.checkpoint_path, images), atol=1e-5)


def test_adapters_in_rlinf_and_di_engine_shapes(project, rl_token, live_server_url, inference_worker_process):
    model = make_trained_model(project, seed=6)
    deployment = deploy(model, reward_type="soft", env_reward_weight=1.0, reward_weight=1.0)
    images = random_images(3, seed=4)
    p = direct_probabilities(model.checkpoint_path, images)
    client = RewardClient(live_server_url, rl_token, deployment.name)

    rewards = RLinfRewardModel(client).compute_rewards({"main_images": images})
    np.testing.assert_allclose(rewards, p, atol=1e-5)

    data = [
        {"next_obs": images[i], "reward": np.array([1.0], np.float32), "done": i == 2, "action": i} for i in range(3)
    ]
    out = DIEngineRewardModel(client).estimate(data)
    assert out is data and [item["action"] for item in out] == [0, 1, 2]
    np.testing.assert_allclose([item["reward"][0] for item in out], 1.0 + p, atol=1e-5)
    assert [item["env_reward"][0] for item in data] == [1.0] * 3  # the env reward, kept for the next estimate


def test_client_errors_are_clear(project, rl_token, live_server_url, inference_worker_process):
    model = make_trained_model(project, seed=7)
    deployment = deploy(model)
    with pytest.raises(NotFoundError, match="no deployment named 'nope'"):
        RewardClient(live_server_url, rl_token, "nope").compute_rewards(random_images(1))
    with pytest.raises(AuthenticationError, match="HTTP 401"):
        RewardClient(live_server_url, "rs_wrong", deployment.name).compute_rewards(random_images(1))
    with pytest.raises(ValueError, match="uint8"):
        RewardClient(live_server_url, rl_token, deployment.name).compute_rewards(random_images(1).astype(np.float32))
    with pytest.raises(BadRequestError, match="env_rewards has 1 values for 2 images"):
        RewardClient(live_server_url, rl_token, deployment.name).compute_rewards(random_images(2), env_rewards=[1.0])
    started = time.monotonic()
    with pytest.raises(ConnectionFailed, match="after 3 tries"):
        RewardClient("http://127.0.0.1:9", rl_token, "x", retries=2, backoff_s=0.01).compute_rewards(random_images(1))
    assert time.monotonic() - started < 10


def test_a_model_that_fails_to_load_marks_the_deployment_unhealthy(
    project, rl_token, live_server_url, inference_worker_process
):
    model = make_trained_model(project, checkpoint_path="checkpoints/does-not-exist")
    deployment = deploy(model)
    client = RewardClient(live_server_url, rl_token, deployment.name)
    with pytest.raises(ServiceUnavailable, match="model failed to load") as info:
        client.compute_rewards(random_images(1))
    assert info.value.status == 503
    deployment.refresh_from_db()
    assert deployment.status == "unhealthy"
    assert "failed to load" in deployment.error
    # Once its settings cache is refreshed (a request after 1 s starts the refresh in the background and
    # is itself answered from the stale settings, by the worker), the web process answers at once.
    time.sleep(1.1)
    deadline = time.monotonic() + 5.0
    while True:
        with pytest.raises(ServiceUnavailable) as info:
            client.compute_rewards(random_images(1))
        if "is unhealthy" in str(info.value):
            break
        assert "model failed to load" in str(info.value) and time.monotonic() < deadline
        time.sleep(0.1)


def _readme_example_command() -> list[str]:
    """The manual's runnable example (docs/serving.md), word for word (`python -m ... --url ... --token <...> --deployment ...`)."""
    import re
    import shlex

    serving = (ROOT / "docs" / "serving.md").read_text()
    found = re.search(r"Runnable example: `(python -m reward_client\.examples\.reward_client_example [^`]+)`", serving)
    assert found, "docs/serving.md's runnable client example moved or changed form"
    return shlex.split(" ".join(found.group(1).split()).replace("<rl_worker token>", "TOKEN"))


def _ood_model_of_the_sample(project):
    """A tiny model that says success everywhere, with OOD statistics fitted on the example's bundled real frames
    (PickCube, as a deployment trained on the demo project would hold them)."""
    from django.core.files.storage import default_storage

    from reward_client.examples.reward_client_example import SAMPLE, real_frames
    from tests.inference.conftest import make_tiny_checkpoint
    from training.resnet.checkpoint import load_checkpoint
    from training.resnet.ood import ood_fit_folder

    frames, labels = real_frames(SAMPLE)
    assert labels is not None and labels.any() and not labels.all()  # both classes, labeled
    jitter = np.random.default_rng(0).integers(-3, 4, size=(8, *frames.shape))
    train = np.clip(frames[None].astype(int) + jitter, 0, 255).astype(np.uint8).reshape(-1, *frames.shape[1:])
    name = make_tiny_checkpoint(seed=3, bias=8.0)
    model, _ = load_checkpoint(default_storage.path(name))
    ood_fit_folder(default_storage.path(name), model, train, np.tile(labels.astype(int), 8), train)
    return make_trained_model(project, checkpoint_path=name)


def test_the_readme_example_sends_real_frames_and_reports_noise_as_a_failure(
    project, rl_token, live_server_url, inference_worker_process
):
    """The README's example, as written there, on a deployment that flags frames unlike its training data
    (`ood_action` fail_reward): the real frames are paid, the noise is a failure and the example says so."""
    deployment = deploy(
        _ood_model_of_the_sample(project), ood_action="fail_reward", threshold=0.5, success_reward=1.0, fail_reward=-1.0
    )
    command = _readme_example_command()
    assert command[:3] == ["python", "-m", "reward_client.examples.reward_client_example"]
    values = {"--url": live_server_url, "--token": rl_token, "--deployment": deployment.name}
    args = [values.get(command[i - 1], word) for i, word in enumerate(command)]
    out = subprocess.run([sys.executable, *args[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
    print(out.stdout[-1500:])
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("step ") == 20 and "DI-engine-style estimate" in out.stdout
    assert "real frames: the deployment agrees with their labels on" in out.stdout
    assert "success 8/8" in out.stdout  # the model says success on every real frame: none of them is flagged
    assert "noise    | success 0/8 | reward -1.000 | flagged off-distribution 8/8" in out.stdout
    assert "noise: failure, as it should be" in out.stdout

    # the same example against a deployment that only flags: noise is paid, and the example says so
    flag_only = deploy(make_trained_model(project, seed=8, bias=8.0), threshold=0.5, success_reward=1.0)
    args = [{"--deployment": flag_only.name}.get(args[i - 1], word) for i, word in enumerate(args)]
    out = subprocess.run(
        [sys.executable, *args[1:], "--steps", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "noise: PAID AS SUCCESS" in out.stdout
