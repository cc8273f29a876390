"""Out-of-distribution frames through the service: each served item carries `ood` (and its score), and a
deployment set to `fail_reward` pays blank, constant and noise frames the fail reward."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from inference.broker import dump_npy
from training.synthetic import make_scene

from .conftest import TINY_SIZE, deploy, make_tiny_checkpoint, make_trained_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def scenes(count: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    labels = [int(i % 2 == 0) for i in range(count)]
    return np.stack([make_scene(bool(label), TINY_SIZE, rng) for label in labels]), labels


def ood_checkpoint() -> str:
    """A tiny checkpoint that says success everywhere, with OOD statistics fitted on seeded frames."""
    from django.core.files.storage import default_storage

    from training.resnet.checkpoint import load_checkpoint
    from training.resnet.ood import ood_fit_folder

    name = make_tiny_checkpoint(seed=3, bias=8.0)
    model, _ = load_checkpoint(default_storage.path(name))
    train_x, train_y = scenes(80, 0)
    val_x, _ = scenes(60, 1)
    ood_fit_folder(default_storage.path(name), model, train_x, train_y, val_x)
    return name


def test_a_fail_reward_deployment_pays_flagged_frames_the_fail_reward_and_says_ood(
    project, live_server_url, inference_worker_process
):
    from projects.services import agent_create

    token = agent_create(name="rl-ood", kind="rl_worker", all_projects=True)[1]
    model = make_trained_model(project, checkpoint_path=ood_checkpoint())
    flagging = deploy(model, ood_action="fail_reward", success_reward=1.0, fail_reward=-1.0, threshold=0.5)
    flag_only = deploy(model, success_reward=1.0, fail_reward=-1.0, threshold=0.5)
    blank = np.zeros((TINY_SIZE, TINY_SIZE, 3), np.uint8)
    grey = np.full((TINY_SIZE, TINY_SIZE, 3), 128, np.uint8)
    noise = np.random.default_rng(7).integers(0, 256, size=(TINY_SIZE, TINY_SIZE, 3), dtype=np.uint8)
    held_out, _ = scenes(4, 2)
    batch = np.concatenate([np.stack([blank, grey, noise]), held_out])

    def served(name: str) -> list[dict]:
        response = requests.post(
            f"{live_server_url}/api/deployments/{name}/rewards",
            data=dump_npy(batch),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-npy"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        return response.json()["items"]

    items = served(flagging.name)
    assert [item["ood"] for item in items[:3]] == [True, True, True]
    assert [item["reward"] for item in items[:3]] == [-1.0, -1.0, -1.0]
    assert [item["success"] for item in items[:3]] == [False, False, False]
    assert all(item["probability"] > 0.5 and item["ood_score"] > 1.0 for item in items[:3])
    in_distribution = [item for item in items[3:] if not item["ood"]]
    assert len(in_distribution) >= 3 and all(item["reward"] == 1.0 for item in in_distribution)

    flagged_only = served(flag_only.name)  # the default: the item says so, the reward is the model's
    assert [item["ood"] for item in flagged_only[:3]] == [True, True, True]
    assert [item["reward"] for item in flagged_only[:3]] == [1.0, 1.0, 1.0]


def test_a_model_without_ood_statistics_serves_ood_null(project, live_server_url, inference_worker_process):
    from projects.services import agent_create

    token = agent_create(name="rl-old", kind="rl_worker", all_projects=True)[1]
    deployment = deploy(make_trained_model(project, seed=4), ood_action="fail_reward")
    response = requests.post(
        f"{live_server_url}/api/deployments/{deployment.name}/rewards",
        data=dump_npy(np.zeros((2, TINY_SIZE, TINY_SIZE, 3), np.uint8)),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-npy"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert [(item["ood"], item["ood_score"]) for item in response.json()["items"]] == [(None, None), (None, None)]


def test_the_monitor_counts_the_frames_a_deployment_flagged(project, live_server_url, inference_worker_process):
    """Served through the real service, flagged frames reach the deployment's reward-hacking monitor."""
    import time

    from inference.monitor.selectors import time_series
    from inference.monitor.services import ref_of
    from projects.services import agent_create

    token = agent_create(name="rl-ood-monitor", kind="rl_worker", all_projects=True)[1]
    deployment = deploy(make_trained_model(project, checkpoint_path=ood_checkpoint()), threshold=0.5)
    noise = np.random.default_rng(8).integers(0, 256, size=(3, TINY_SIZE, TINY_SIZE, 3), dtype=np.uint8)
    held_out, _ = scenes(4, 2)
    response = requests.post(
        f"{live_server_url}/api/deployments/{deployment.name}/rewards",
        data=dump_npy(np.concatenate([noise, held_out])),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-npy"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    flagged = sum(bool(item["ood"]) for item in response.json()["items"])
    assert flagged >= 3
    deadline, series = time.monotonic() + 10, {}
    while time.monotonic() < deadline:  # the web process's monitor thread records it just after answering
        series = time_series(ref_of(deployment.name, deployment.pk), hours=1)
        if series["ood_checked"]:
            break
        time.sleep(0.1)
    assert (series["ood_total"], series["ood_checked"]) == (flagged, 7)
