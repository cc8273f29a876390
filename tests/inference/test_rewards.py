"""Reward modes, threshold, binary/soft mapping and the combine formula against hand-computed values."""

from __future__ import annotations

import pytest

from inference.rewards import (
    RewardSettings,
    RewardSettingsError,
    combine,
    compute_rewards,
    history_step,
    model_output,
    plan_scoring,
)


def test_success_is_strictly_above_threshold_and_probability_is_raw():
    settings = RewardSettings(threshold=0.6)
    items = compute_rewards(settings, [0.59, 0.6, 0.61])
    assert [i.probability for i in items] == [0.59, 0.6, 0.61]
    assert [i.success for i in items] == [False, False, True]
    assert [i.reward for i in items] == [0.0, 0.0, 1.0]


def test_binary_reward_uses_success_and_fail_reward():
    settings = RewardSettings(threshold=0.5, success_reward=2.5, fail_reward=-1.0)
    assert model_output(0.9, settings) == 2.5
    assert model_output(0.1, settings) == -1.0


def test_soft_reward_is_the_probability():
    settings = RewardSettings(reward_type="soft", threshold=0.9)
    items = compute_rewards(settings, [0.25, 0.95])
    assert [i.reward for i in items] == [0.25, 0.95]
    assert [i.success for i in items] == [False, True]


def test_combine_formula_weights_env_and_model_rewards():
    # reward = env_reward_weight * env_reward + reward_weight * model_output
    settings = RewardSettings(env_reward_weight=0.5, reward_weight=2.0, reward_type="soft")
    assert combine(3.0, 0.25, settings) == pytest.approx(0.5 * 3.0 + 2.0 * 0.25)
    items = compute_rewards(settings, [0.25, 0.75], env_rewards=[3.0, -1.0])
    assert [i.reward for i in items] == pytest.approx([2.0, 1.0])


def test_default_combine_replaces_env_reward():
    items = compute_rewards(RewardSettings(), [0.8], env_rewards=[100.0])
    assert items[0].reward == 1.0


def test_binary_weighted_add_mode_by_hand():
    settings = RewardSettings(env_reward_weight=1.0, reward_weight=0.5, success_reward=1.0, fail_reward=-0.5)
    items = compute_rewards(settings, [0.7, 0.3], env_rewards=[0.2, 0.2])
    assert [i.reward for i in items] == pytest.approx([0.2 + 0.5, 0.2 - 0.25])


def test_terminal_mode_scores_only_done_items_and_others_get_env_part_only():
    settings = RewardSettings(reward_mode="terminal", env_reward_weight=1.0, reward_weight=10.0)
    scored, history = plan_scoring(settings, 3, dones=[False, True, False])
    assert scored == [False, True, False]
    assert history is None
    items = compute_rewards(settings, [None, 0.9, None], scored=scored, env_rewards=[0.1, 0.2, 0.3])
    assert [i.reward for i in items] == pytest.approx([0.1, 0.2 + 10.0, 0.3])
    assert items[0].probability is None and items[0].success is None and not items[0].scored
    assert items[1].success is True


def test_terminal_mode_without_dones_scores_nothing():
    scored, _ = plan_scoring(RewardSettings(reward_mode="terminal"), 2)
    assert scored == [False, False]


def test_history_buffer_waits_for_min_history_then_scores_at_multiples_of_the_interval():
    """RLinf rlinf/utils/env_helpers/history_manager.py:155-170: scored when the buffer holds at least
    min_history_size entries and `history_counts % input_interval == 0`."""
    settings = RewardSettings(reward_mode="history_buffer", history_size=5, min_history_size=3, input_interval=2)
    count, pattern = 0, []
    for _ in range(8):
        window, count = history_step(count, settings)
        pattern.append(window)
    # counts 1..8: 2 holds too few; 4, 6, 8 are multiples of 2 with >= 3 held; windows = min(count, 5)
    assert pattern == [0, 0, 0, 4, 0, 5, 0, 5]


def test_history_buffer_unscored_steps_get_interval_reward_and_done_resets_stream():
    settings = RewardSettings(
        reward_mode="history_buffer", history_size=4, min_history_size=2, input_interval=1, interval_reward=-0.1
    )
    scored, after = plan_scoring(settings, 3, dones=[False, True, False], history=[0, 1, 3])
    assert scored == [0, 2, 4]  # count 1 holds too few; counts 2 and 4 are scored with what they hold
    assert after == [1, 0, 4]
    items = compute_rewards(settings, [None, 0.8, 0.2], scored=scored)
    assert [i.reward for i in items] == pytest.approx([-0.1, 1.0, 0.0])


def test_per_step_scores_everything():
    scored, history = plan_scoring(RewardSettings(), 4, dones=[True, False, True, False])
    assert scored == [True] * 4 and history is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"reward_mode": "sometimes"},
        {"reward_type": "fuzzy"},
        {"threshold": 1.5},
        {"min_history_size": 6, "history_size": 5},
        {"input_interval": -1},
        {"reward_weight": float("nan")},
    ],
)
def test_bad_settings_are_refused_with_the_field_named(kwargs):
    with pytest.raises(RewardSettingsError, match=next(iter(kwargs)).split("_")[0]):
        RewardSettings(**kwargs)


def test_scored_item_without_probability_is_an_error():
    with pytest.raises(ValueError):
        compute_rewards(RewardSettings(), [None])
