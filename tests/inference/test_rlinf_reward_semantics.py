"""Reward modes and history rules against sequences computed by hand from RLinf's code (commit a3816b5).

Sources, by file and line:
- thresholded output: rlinf/models/embodiment/reward/resnet_reward_model.py:296-299
  (`torch.where(rewards > thr, rewards, 0)`: zeroed AT or below `reward_threshold`).
- history counting: rlinf/utils/env_helpers/history_manager.py:71-78 (min_history_size default 0; an unset
  input_interval is `max(history_size, 1)`), :155-181 (too few entries -> empty window; `count % interval
  == 0` -> the last history_size entries; else on done with input_on_done -> the last `count % interval`
  entries), :186-199 (done clears; otherwise the buffer is trimmed to history_size after each build).
- combine: rlinf/workers/env/env_worker.py:729-734 (`env_reward_weight * env + reward_weight * output`).
- history_reward_assign: rlinf/workers/env/env_worker.py:875-896 (the earlier steps -2..-L of the window's
  length L also get `reward_weight * output`, capped at the rollout's length).
- gt_success_bonus and interval_reward: rlinf/workers/reward/api_reward_worker.py:222-254 (every env starts at
  interval_reward, scored envs get the parsed reward, then the bonus is added for every env whose info says
  success: rlinf/models/embodiment/reward/vlm_reward_utils/common.py:35-70).
"""

from __future__ import annotations

import pytest

from inference.rewards import (
    RewardSettings,
    assign_history_rewards,
    compute_rewards,
    history_step,
    model_output,
    plan_scoring,
)


def windows_for(settings: RewardSettings, dones: list[bool]) -> list[int]:
    count, out = 0, []
    for done in dones:
        window, count = history_step(count, settings, done)
        out.append(window)
    return out


def test_thresholded_output_is_the_probability_zeroed_at_or_below_the_threshold():
    settings = RewardSettings(reward_type="thresholded", threshold=0.5)
    assert [model_output(p, settings) for p in (0.3, 0.5, 0.51, 0.9)] == [0.0, 0.0, 0.51, 0.9]
    items = compute_rewards(settings, [0.5, 0.75])
    assert [i.probability for i in items] == [0.5, 0.75]  # the raw probability stays visible
    assert [i.success for i in items] == [False, True]
    assert [i.reward for i in items] == [0.0, 0.75]


def test_unset_interval_means_history_size():
    settings = RewardSettings(reward_mode="history_buffer", history_size=4, min_history_size=2, input_interval=0)
    assert settings.interval == 4
    # counts 1..10: multiples of 4 are scored, each with the last 4 steps
    assert windows_for(settings, [False] * 10) == [0, 0, 0, 4, 0, 0, 0, 4, 0, 0]


def test_min_history_counts_held_entries_not_the_interval():
    settings = RewardSettings(reward_mode="history_buffer", history_size=3, min_history_size=3, input_interval=2)
    # count 2 holds 2 < 3 entries: nothing; counts 4 and 6 hold 4 (3 kept + the new one): window of 3
    assert windows_for(settings, [False] * 6) == [0, 0, 0, 3, 0, 3]


def test_input_on_done_scores_the_steps_since_the_last_window():
    dones = [False, False, False, False, True, False, False, False]
    on = RewardSettings(
        reward_mode="history_buffer", history_size=5, min_history_size=0, input_interval=3, input_on_done=True
    )
    # count 3 -> 3 steps; count 5 is done and 5 % 3 = 2 -> the 2 steps since; the stream restarts: count 3 -> 3
    assert windows_for(on, dones) == [0, 0, 3, 0, 2, 0, 0, 3]
    off = RewardSettings(reward_mode="history_buffer", history_size=5, min_history_size=0, input_interval=3)
    assert windows_for(off, dones) == [0, 0, 3, 0, 0, 0, 0, 3]


def test_done_window_may_hold_one_step_more_than_history_size_like_rlinf():
    """RLinf trims to history_size after each build, so the next build sees history_size + 1 entries: with
    history_size 2 and interval 5, a done at count 4 takes slice(max(0, 3 - 4), 3), all 3 entries."""
    settings = RewardSettings(
        reward_mode="history_buffer", history_size=2, min_history_size=0, input_interval=5, input_on_done=True
    )
    assert windows_for(settings, [False, False, False, True]) == [0, 0, 0, 3]


def test_done_with_too_few_steps_is_not_scored_even_with_input_on_done():
    settings = RewardSettings(
        reward_mode="history_buffer", history_size=5, min_history_size=3, input_interval=5, input_on_done=True
    )
    assert windows_for(settings, [False, True, False, False, True]) == [0, 0, 0, 0, 3]


def test_streams_count_independently_and_a_done_resets_only_its_stream():
    settings = RewardSettings(reward_mode="history_buffer", history_size=2, min_history_size=1, input_interval=2)
    windows, counts = plan_scoring(settings, 2, dones=[True, False], history=[1, 1])
    assert windows == [2, 2] and counts == [0, 2]
    windows, counts = plan_scoring(settings, 2, dones=[False, False], history=counts)
    assert windows == [0, 0] and counts == [1, 3]


def test_history_rewards_interval_reward_success_bonus_and_combine_by_hand():
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
    assert windows == [0, 2, 0, 2]
    items = compute_rewards(
        settings,
        [None, 0.6, None, 0.3],
        scored=windows,
        env_rewards=[1.0, -1.0, 0.0, 4.0],
        env_success=[True, False, False, True],
    )
    # outputs: interval 0.25 + bonus 20; p 0.6; interval 0.25; p 0.3 + bonus 20
    assert [i.model_output for i in items] == pytest.approx([20.25, 0.6, 0.25, 20.3])
    assert [i.reward for i in items] == pytest.approx(
        [0.5 * 1.0 + 2.0 * 20.25, 0.5 * -1.0 + 2.0 * 0.6, 0.0 + 2.0 * 0.25, 0.5 * 4.0 + 2.0 * 20.3]
    )


def test_bonus_only_on_scored_steps_outside_history_mode():
    settings = RewardSettings(reward_mode="terminal", reward_type="soft", gt_success_bonus=5.0)
    items = compute_rewards(settings, [None, 0.4], scored=[0, 1], env_success=[True, True])
    assert [i.model_output for i in items] == pytest.approx([0.0, 5.4])


def test_history_reward_assign_spreads_the_window_reward_over_its_earlier_steps():
    settings = RewardSettings(
        reward_mode="history_buffer",
        reward_type="binary",
        success_reward=1.0,
        history_size=3,
        min_history_size=0,
        input_interval=3,
        reward_weight=0.5,
        env_reward_weight=1.0,
        history_reward_assign=True,
    )
    env = [0.1, 0.2, 0.3]
    rewards, count = [], 0
    for t in range(3):
        window, count = history_step(count, settings)
        item = compute_rewards(settings, [0.9 if window else None], scored=[window], env_rewards=[env[t]])[0]
        rewards.append(item.reward)
        assign_history_rewards(rewards, item)
    # step 3 scores a window of 3 steps: its own reward 0.3 + 0.5 * 1.0; the two before get + 0.5 each
    assert item.window == 3 and item.assign_previous == 2 and item.assign_reward == pytest.approx(0.5)
    assert rewards == pytest.approx([0.1 + 0.5, 0.2 + 0.5, 0.3 + 0.5])
    # capped at what the rollout holds (RLinf: min(length, len(rollout_rewards)))
    assert assign_history_rewards([1.0, 2.0], item) == pytest.approx([1.5, 2.0])


def test_without_history_reward_assign_nothing_is_spread():
    settings = RewardSettings(reward_mode="history_buffer", history_size=2, min_history_size=0, input_interval=2)
    item = compute_rewards(settings, [0.9], scored=[2])[0]
    assert item.window == 2 and item.assign_previous == 0
    assert assign_history_rewards([0.0, 1.0], item) == [0.0, 1.0]
