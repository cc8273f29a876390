"""What flagged (out-of-distribution) items receive under each deployment `ood_action` (inference.rewards)."""

from __future__ import annotations

import pytest

from inference.rewards import RewardSettings, RewardSettingsError, compute_rewards, result_parts

OOD = [(True, 3.5), (False, 0.4), None]


@pytest.mark.parametrize(
    ("action", "first_reward", "first_success"),
    [("flag", 2.0, True), ("fail_reward", -1.0, False), ("interval_reward", 0.25, False)],
)
def test_a_flagged_item_gets_what_the_action_says_and_the_others_are_untouched(action, first_reward, first_success):
    settings = RewardSettings(
        reward_type="binary", success_reward=2.0, fail_reward=-1.0, interval_reward=0.25, ood_action=action
    )
    items = compute_rewards(settings, [0.9, 0.9, 0.9], ood=OOD)
    assert (items[0].reward, items[0].success, items[0].ood, items[0].ood_score) == (
        first_reward,
        first_success,
        True,
        3.5,
    )
    assert (items[1].reward, items[1].success, items[1].ood) == (2.0, True, False)
    assert (items[2].reward, items[2].ood, items[2].ood_score) == (2.0, None, None)  # a model without statistics


def test_an_unknown_action_is_refused_by_name():
    with pytest.raises(RewardSettingsError, match="ood_action must be one of flag, fail_reward, interval_reward"):
        RewardSettings(ood_action="drop")


def test_worker_results_with_and_without_ood_statistics_read_alike():
    assert result_parts(0.25) == (0.25, None)
    assert result_parts({"probability": 0.75, "ood": True, "ood_score": 2.0}) == (0.75, (True, 2.0))
