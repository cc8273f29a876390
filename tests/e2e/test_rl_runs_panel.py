"""The deployment page's RL panel in a real browser: DI-engine's adapter (reward_client.di_engine, `monitor_run`
set) asks a real web server and inference worker for rewards with the env's success of each frame, and the
page then shows that run with its env success and its mean reward, as the monitor counted them."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from tests.conftest import login
from tests.inference.conftest import deploy, direct_probabilities, make_trained_model
from tests.reward_client.test_di_engine import transitions

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_deployment_page_shows_an_rl_runs_reward_and_env_success(
    browser, live_server_url, inference_worker_process, project
):
    from inference.monitor.services import monitor_flush
    from projects.services import agent_create
    from reward_client import DIEngineRewardModel

    trained = make_trained_model(project, seed=2)
    deployment = deploy(trained, reward_type="soft")
    token = agent_create(name="dqn", kind="rl_worker", scopes=["rewards"], projects=[project])[1]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/deployments/{deployment.name}/")
    assert "No RL run has sent the env's success yet" in page.inner_text("#rl-runs")

    config = {"url": live_server_url, "token": token, "deployment": deployment.name}
    model = DIEngineRewardModel({**config, "success_rule": "info", "monitor_run": "dqn-seed0"}, "cpu", None)
    batch = transitions(episodes=2, steps=4, seed=3)  # half the frames succeed (info["success"])
    model.estimate(batch)
    env_success = np.mean([t["info"]["success"] for t in batch])
    probabilities = direct_probabilities(trained.checkpoint_path, np.stack([t["next_obs"] for t in batch]))
    deadline = time.monotonic() + 30
    while True:  # the web process's monitor thread records the batch a moment after it answered
        monitor_flush()
        page.reload()
        if page.locator("#rl-runs tr.rl-run").count() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    row = page.locator("#rl-runs tr.rl-run")
    assert row.count() == 1 and row.get_attribute("data-run").endswith("/dqn-seed0")
    assert row.locator(".env-success").inner_text() == f"{env_success:.2f} → {env_success:.2f}"
    reward = f"{np.mean(np.round(probabilities * 1000) / 1000):.2f}"
    assert row.locator(".reward").inner_text() == f"{reward} → {reward}"
    assert row.locator("svg polyline.env-line").get_attribute("points")
    assert row.locator("svg polyline.reward-line").count() == 1
    page.close()
