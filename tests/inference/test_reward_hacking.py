"""Done-when test of the reward-hacking monitor: a real ManiSkill PickCube robot, a deliberately weak
reward model trained only on frames where the cube is lifted, served by a real inference worker through
the ASGI server and Redis. A policy that hovers the open gripper at the goal fools the model: the alarm
fires and the false-success frames land at the head of the project's labeling queue. An honest run of
the same length on the same model stays quiet."""

from __future__ import annotations

import time
import uuid

import pytest
import requests

from reward_client import RewardClient

from .conftest import deploy

# ManiSkill's first scene build dominates (about 30 s on an idle 2-core machine, minutes under load)
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(1500)]

STEPS = 20
SIZE = 32


def weak_model(project, images, labels):
    from django.core.files.storage import default_storage

    from training.models import TrainedModel

    from .hacking_scenario import train_weak_model

    name = f"checkpoints/weak_{uuid.uuid4().hex[:8]}"
    train_weak_model(images, labels, default_storage.path(name))
    return TrainedModel.objects.create(project=project, kind="resnet", name="weak", checkpoint_path=name, config={})


def health(base: str, token: str, name: str) -> dict:
    response = requests.get(f"{base}/api/deployments/{name}/health", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()


def wait_for(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.3)


def test_a_hovering_policy_raises_the_alarm_and_an_honest_run_stays_quiet(
    project, live_server_url, inference_worker_process
):
    from inference.models import DeploymentMonitor, ServedFrame
    from inference.monitor.alarm_queue import ALARM_REASON
    from projects.services import agent_create
    from robot_agent.maniskill_robot import ManiSkillRobot
    from training.queue.services import label_queue_items, label_url

    from .hacking_scenario import HoverPolicy, RestPolicy, lifted_frames, rl_rollout

    token = agent_create(name="rl-run", kind="rl_worker", projects=[project])[1]
    robot = ManiSkillRobot(width=SIZE, height=SIZE, max_episode_steps=500)
    robot.connect()
    try:
        images, labels = lifted_frames(robot, seeds=[0, 1, 2], steps=12)
        model = weak_model(project, images, labels)
        honest, hacked = deploy(model), deploy(model)
        for d in (honest, hacked):
            DeploymentMonitor.objects.create(
                deployment=d, false_success_threshold=0.3, hold_s=1.0, window_s=120.0, min_items=6
            )
        quiet = rl_rollout(
            robot, RestPolicy(seed=3), RewardClient(live_server_url, token, honest.name),
            seed=7, steps=STEPS, episode_id="honest-7",
        )  # fmt: skip
        fooled = rl_rollout(
            robot, HoverPolicy(robot), RewardClient(live_server_url, token, hacked.name),
            seed=7, steps=STEPS, episode_id="hover-7",
        )  # fmt: skip
    finally:
        robot.disconnect()

    assert not any(quiet.env_success) and not any(fooled.env_success)  # the cube never reaches the goal
    assert fooled.false_successes >= STEPS // 3, fooled.probabilities  # the weak model pays for hovering
    assert quiet.false_successes <= 1, quiet.probabilities

    state = wait_for(lambda: (h := health(live_server_url, token, hacked.name))["alarm"] and h)
    assert state, health(live_server_url, token, hacked.name)
    assert not state["ok"] and state["alarm_false_success_rate"] > 0.3
    queued = wait_for(lambda: list(ServedFrame.objects.filter(deployment=hacked, queued=True)))
    assert queued and all(f.success and f.env_success is False for f in queued)
    assert {f.episode_ref for f in queued} == {"hover-7"}
    # ...as the head of the project's labeling queue, one key from becoming training data
    items = wait_for(lambda: list(label_queue_items(project=project, limit=500)))
    alarm_items = [item for item in items if ALARM_REASON in item.reasons]
    assert alarm_items and items[: len(alarm_items)] == alarm_items
    assert {item.step.info["served_frame"] for item in alarm_items} == {f.pk for f in queued}
    assert {item.step.info["episode_ref"] for item in alarm_items} == {"hover-7"}
    assert all(item.step.env_success is False and item.probability > 0.5 for item in alarm_items)
    assert label_url(alarm_items[0]).startswith(f"/episodes/{alarm_items[0].step.episode.uuid}/label/")

    calm = wait_for(lambda: (h := health(live_server_url, token, honest.name))["env_flagged"] >= STEPS and h)
    assert calm and not calm["alarm"] and calm["ok"]
    assert not ServedFrame.objects.filter(deployment=honest, queued=True).exists()
