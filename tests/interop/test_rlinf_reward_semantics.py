"""Reward modes, history counting, combining, the success bonus and `history_reward_assign`: a deployment's
numbers against RLinf 0.3.0's own functions, run in the interop environment (side_rlinf_mirrors.py; the counting
through side_runner.py's HistoryManager):

- thresholded output: `ResNetRewardModel.compute_reward` with `reward_threshold`;
- history counting: `HistoryManager.build_history_input` (rlinf/workers/env/history_manager.py);
- combine: `EnvWorker.compute_bootstrap_rewards` (`env_reward_weight * env + reward_weight * output`);
- interval reward and success bonus: `HistoryVLMRewardModel.compute_reward` with its input builder's valid windows
  and `VLMRewardModel.apply_gt_success_bonus` (only the generate-and-parse step is given);
- `history_reward_assign`: `EnvWorker.assign_history_reward` on a rollout's rewards.

The one intended difference is named where it is tested: a window shorter than `min_history_size` is not scored
here (RLinf would hand a video model a window it cannot take).
"""

from __future__ import annotations

from typing import Any

import pytest

from inference.rewards import (
    RewardSettings,
    assign_history_rewards,
    compute_rewards,
    history_step,
    model_output,
    plan_scoring,
)

from .conftest import side_run

MIRRORS = "side_rlinf_mirrors.py"


def rlinf(command: str, **args) -> dict:
    return side_run(command, runner=MIRRORS, **args)


def our_windows(settings: RewardSettings, dones: list[bool]) -> list[int]:
    count, out = 0, []
    for done in dones:
        window, count = history_step(count, settings, done)
        out.append(window)
    return out


def rlinf_windows(settings: dict, dones: list[bool]) -> list[int]:
    """RLinf's HistoryManager's window length at each step of one env."""
    lengths = side_run("history_windows", settings=settings, dones=[[d] for d in dones])["lengths"]
    return [row[0] for row in lengths]


def test_thresholded_output_is_rlinfs_resnet_reward():
    probabilities = [0.3, 0.5, 0.51, 0.75, 0.9]
    for threshold in (0.5, 0.75):
        answer = rlinf("resnet_threshold", probabilities=probabilities, reward_threshold=threshold)
        theirs, seen = answer["rewards"], answer["probabilities"]  # what RLinf's sigmoid gave its threshold
        settings = RewardSettings(reward_type="thresholded", threshold=threshold)
        assert [model_output(p, settings) for p in seen] == pytest.approx(theirs, abs=1e-6)
        items = compute_rewards(settings, seen)
        assert [i.reward for i in items] == pytest.approx(theirs, abs=1e-6)
        assert [i.probability for i in items] == seen  # the raw probability stays visible
        if threshold == 0.5:
            assert seen[1] == 0.5 and theirs[:2] == [0.0, 0.0] and theirs[2] > 0  # zeroed at and below it


@pytest.mark.parametrize(
    ("settings", "dones"),
    [
        # interval unset: history_size
        ({"history_size": 4, "min_history_size": 2, "input_interval": 0, "input_on_done": False}, [False] * 10),
        # min_history counts held entries, not the interval
        ({"history_size": 3, "min_history_size": 3, "input_interval": 2, "input_on_done": False}, [False] * 6),
        # input_on_done scores the steps since the last window; off, it does not
        (
            {"history_size": 5, "min_history_size": 0, "input_interval": 3, "input_on_done": True},
            [False, False, False, False, True, False, False, False],
        ),
        (
            {"history_size": 5, "min_history_size": 0, "input_interval": 3, "input_on_done": False},
            [False, False, False, False, True, False, False, False],
        ),
        # a done window may hold one step more than history_size (RLinf trims after each build)
        ({"history_size": 2, "min_history_size": 0, "input_interval": 5, "input_on_done": True}, [False] * 3 + [True]),
    ],
)
def test_history_windows_are_rlinfs(settings, dones):
    theirs = rlinf_windows(settings, dones)
    ours = our_windows(RewardSettings(reward_mode="history_buffer", **settings), dones)
    assert ours == theirs and any(theirs)


def test_a_done_window_shorter_than_min_history_is_the_one_difference():
    settings: dict[str, Any] = {"history_size": 5, "min_history_size": 3, "input_interval": 2, "input_on_done": True}
    dones = [False, False, False, False, True]
    theirs = rlinf_windows(settings, dones)
    ours = our_windows(RewardSettings(reward_mode="history_buffer", **settings), dones)
    # the done step: 5 entries held (>= 3), 5 % 2 = 1 step since the last window: RLinf hands over a 1-step
    # window, which we do not score
    assert theirs[4] == 1 and ours[4] == 0
    assert ours[:4] == theirs[:4] and theirs[3] == 4


def test_streams_count_independently_as_rlinfs_envs_do():
    settings: dict[str, Any] = {"history_size": 2, "min_history_size": 1, "input_interval": 2, "input_on_done": False}
    dones = [[True, False], [False, False], [False, False]]
    theirs = side_run("history_windows", settings=settings, dones=[[False, False], *dones])["lengths"][1:]
    reward = RewardSettings(reward_mode="history_buffer", **settings)
    counts: list[int] | None = [1, 1]
    ours = []
    for step_dones in dones:
        windows, counts = plan_scoring(reward, 2, dones=step_dones, history=counts)
        ours.append(windows)
    assert ours == theirs


def test_interval_reward_success_bonus_and_combine_are_rlinfs():
    settings = RewardSettings(
        reward_mode="history_buffer",
        reward_type="soft",
        history_size=2,
        min_history_size=0,
        input_interval=2,
        interval_reward=0.25,
        gt_success_bonus=20.0,
        env_reward_weight=0.5,
        reward_weight=2.0,
    )
    windows, _ = plan_scoring(settings, 4, history=[0, 1, 0, 1])
    parsed, env_rewards, success = [0.6, 0.3], [1.0, -1.0, 0.0, 4.0], [True, False, False, True]
    items = compute_rewards(
        settings,
        [None, parsed[0], None, parsed[1]],
        scored=windows,
        env_rewards=env_rewards,
        env_success=success,
    )
    outputs = rlinf(
        "history_vlm_rewards",
        window_lengths=windows,
        parsed=parsed,
        interval_reward=0.25,
        gt_success_bonus=20.0,
        success=success,
    )["rewards"]
    assert [i.model_output for i in items] == pytest.approx(outputs, abs=1e-5)
    combined = rlinf(
        "combine_rewards", env_rewards=[env_rewards], model_outputs=[outputs], env_reward_weight=0.5, reward_weight=2.0
    )["rewards"][0]
    assert [i.reward for i in items] == pytest.approx(combined, abs=1e-4)
    assert len(set(combined)) == 4  # every env's reward differs: the case tells the terms apart


def test_micro_batches_give_rlinfs_rewards_too():
    settings = RewardSettings(
        reward_mode="history_buffer", reward_type="soft", interval_reward=-0.5, gt_success_bonus=1.0, history_size=3
    )
    windows = [3, 0, 3, 3, 0]
    parsed = [0.9, 0.1, 0.4]
    success = [False, True, True, False, True]
    items = compute_rewards(settings, [0.9, None, 0.1, 0.4, None], scored=windows, env_success=success)
    outputs = rlinf(
        "history_vlm_rewards",
        window_lengths=windows,
        parsed=parsed,
        interval_reward=-0.5,
        gt_success_bonus=1.0,
        success=success,
        infer_micro_batch_size=2,
    )["rewards"]
    assert [i.model_output for i in items] == pytest.approx(outputs, abs=1e-5)


def test_history_reward_assign_is_rlinfs():
    settings = RewardSettings(
        reward_mode="history_buffer",
        reward_type="binary",
        success_reward=1.0,
        fail_reward=0.0,
        history_size=3,
        min_history_size=0,
        input_interval=3,
        reward_weight=0.5,
        env_reward_weight=1.0,
        history_reward_assign=True,
    )
    # three envs, rollouts of 3 steps; at the last step env 0 scores a 3-step window, env 1 a 2-step one (it
    # was done before), env 2 none
    rollout = [[0.1, 1.0, -1.0], [0.2, 2.0, -2.0], [0.3, 3.0, -3.0]]
    windows = [3, 2, 0]
    items = compute_rewards(settings, [0.9, 0.8, None], scored=windows, env_rewards=rollout[-1])
    theirs = rlinf(
        "assign_history",
        rewards=rollout,
        window_lengths=windows,
        model_outputs=[i.model_output for i in items],
        reward_weight=0.5,
    )["rewards"]
    for env, item in enumerate(items):
        ours = assign_history_rewards([step[env] for step in rollout], item)
        assert ours == pytest.approx([step[env] for step in theirs], abs=1e-6), env
    # env 0's window reaches two steps back, env 1's one, env 2 has none
    assert theirs[0][0] != rollout[0][0] and theirs[0][1] == rollout[0][1] and theirs[1][1] != rollout[1][1]
    assert [step[2] for step in theirs] == [step[2] for step in rollout]
    # capped at what the rollout holds (RLinf: min(length, len(rollout_rewards)))
    short = rlinf(
        "assign_history", rewards=rollout[:2], window_lengths=windows, model_outputs=[1.0, 1.0, 0.0], reward_weight=0.5
    )["rewards"]
    item = compute_rewards(settings, [0.9], scored=[3])[0]
    assert assign_history_rewards([step[0] for step in rollout[:2]], item) == pytest.approx([s[0] for s in short])


def test_without_history_reward_assign_nothing_is_spread():
    settings = RewardSettings(reward_mode="history_buffer", history_size=2, min_history_size=0, input_interval=2)
    item = compute_rewards(settings, [0.9], scored=[2])[0]
    assert item.window == 2 and item.assign_previous == 0
    assert assign_history_rewards([0.0, 1.0], item) == [0.0, 1.0]
