"""Switching a deployment to another checkpoint while requests stream loses none of them."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from reward_client import RewardClient

from .conftest import deploy, direct_probabilities, make_trained_model, random_images

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_swapping_the_checkpoint_while_requests_stream_drops_nothing(
    project, live_server_url, inference_worker_process
):
    from inference.services import deployment_update
    from projects.services import agent_create

    token = agent_create(name="rl-swap", kind="rl_worker", all_projects=True)[1]
    old = make_trained_model(project, seed=1, bias=-6.0)  # probabilities near 0
    new = make_trained_model(project, seed=2, bias=6.0)  # probabilities near 1
    deployment = deploy(old)
    first_version = deployment.version
    images = random_images(2, seed=9)
    p_old = direct_probabilities(old.checkpoint_path, images)
    p_new = direct_probabilities(new.checkpoint_path, images)
    assert p_old.max() < 0.1 and p_new.min() > 0.9

    client = RewardClient(live_server_url, token, deployment.name)
    client.compute_rewards(images)  # the old model is loaded and serving
    results: list[np.ndarray] = []
    errors: list[Exception] = []
    stop = threading.Event()

    def stream():
        own = RewardClient(live_server_url, token, deployment.name)
        while not stop.is_set():
            try:
                results.append(own.compute_rewards(images).probabilities)
            except Exception as exc:  # any failure is a lost request
                errors.append(exc)

    threads = [threading.Thread(target=stream) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    before = len(results)
    deployment_update(deployment=deployment, trained_model=new)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if results and np.allclose(results[-1], p_new, atol=1e-5):
            break
        time.sleep(0.1)
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join(60)

    assert errors == []
    assert before > 0
    # every answer came from exactly one of the two checkpoints, old ones first, then the new one
    from_new = [bool(np.allclose(r, p_new, atol=1e-5)) for r in results]
    from_old = [bool(np.allclose(r, p_old, atol=1e-5)) for r in results]
    assert all(a or b for a, b in zip(from_new, from_old, strict=True))
    assert from_new[-1] and from_old[0]
    deployment.refresh_from_db()
    assert deployment.version > first_version and deployment.status == "healthy"
