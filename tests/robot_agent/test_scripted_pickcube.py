"""ManiSkill's scripted pick-cube plan, replayed step by step on the camera env, reaches env success."""

import pytest

from robot_agent.collect import collect_scripted

pytestmark = pytest.mark.slow


def test_the_scripted_policy_lifts_the_cube_to_the_goal():
    (episode,) = list(collect_scripted([0], size=32, hold_steps=3))
    assert episode.first_success is not None and episode.first_success > 20  # lifted only after reach and grasp
    last = episode.observations[-1]
    assert last.success and last.info["is_grasped"]
    assert set(last.images) == {"main", "extra"} and last.images["main"].shape == (32, 32, 3)
    assert len(episode.actions) == len(episode.observations) - 1 and len(episode.actions[0]) == 8
