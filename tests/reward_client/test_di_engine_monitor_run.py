"""`monitor_run`: the DI-engine adapter sends each scored batch's env success (by `success_rule`, per transition)
and the run's name as the stream, which the reward-hacking monitor and the deployment's RL panel count."""

from __future__ import annotations

import numpy as np
import pytest

from reward_client import DIEngineRewardModel
from reward_client.client import RewardResult
from reward_client.success import success_rule

from .test_di_engine_settings import FakeService


class MonitoredService(FakeService):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict] = []

    def compute_rewards(self, images, env_rewards=None, dones=None, **monitor) -> RewardResult:
        self.sent.append(monitor)
        return super().compute_rewards(images, env_rewards, dones)


def transitions(rewards: list[float], dones: list[bool]) -> list[dict]:
    frame = np.zeros((3, 8, 8), np.float32)
    return [
        {"obs": frame, "next_obs": frame, "reward": np.array([r], np.float32), "done": d}
        for r, d in zip(rewards, dones, strict=True)
    ]


def test_each_request_carries_the_env_success_of_its_frames_and_the_runs_name():
    service = MonitoredService()
    model = DIEngineRewardModel(
        client=service, env_reward="ignore", success_rule="done_reward>=1", monitor_run="dqn-7", estimate_batch=2
    )
    batch = transitions([0.0, 1.0, 1.0], [False, True, False])
    model.estimate(batch)
    assert service.sent == [
        {"env_success": [False, True], "stream": "dqn-7"},
        {"env_success": [False], "stream": "dqn-7"},  # a reward of 1 that did not end the episode
    ]
    model.estimate(batch)  # sampled again: the flags come from the env reward kept aside, not the served one
    assert service.sent[2]["env_success"] == [False, True]


@pytest.mark.parametrize("rule", ["return>=1", "none"])
def test_nothing_is_sent_where_the_rule_cannot_tell_a_transition_alone_or_no_run_is_named(rule):
    service = MonitoredService()
    DIEngineRewardModel(client=service, success_rule=rule, monitor_run="r").estimate(transitions([1.0], [True]))
    DIEngineRewardModel(client=service, success_rule="reward>=1").estimate(transitions([1.0], [True]))
    assert service.sent == [{}, {}]
    assert success_rule("reward>=0.5").per_transition(transitions([0.2, 0.7], [False, False])) == [False, True]
