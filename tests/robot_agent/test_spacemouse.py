"""SpaceMouse mapping from recorded device states (no device needed)."""

import numpy as np
import pytest

from robot_agent.policies import HoldPolicy, RandomPolicy, SpaceMouseTeleop
from robot_agent.robot import Observation
from robot_agent.spacemouse import SpaceMouseDevice, SpaceMouseMapping, SpaceMouseState, SpaceMouseUnavailable

# States as pyspacemouse reports them while an operator pushes the cap (recorded values).
IDLE_NOISE = SpaceMouseState(x=0.04, y=-0.06, z=0.02, roll=0.01, pitch=-0.05, yaw=0.03, buttons=(0, 0))
PUSH_FORWARD = SpaceMouseState(x=0.0, y=0.82, z=0.0, roll=0.0, pitch=0.0, yaw=0.0, buttons=(0, 0))
PUSH_RIGHT_AND_DOWN = SpaceMouseState(x=0.55, y=0.0, z=-1.0, roll=0.0, pitch=0.0, yaw=0.0, buttons=(0, 0))
TWIST = SpaceMouseState(x=0.0, y=0.0, z=0.0, roll=0.0, pitch=0.0, yaw=0.6, buttons=(0, 0))
LEFT_BUTTON = SpaceMouseState(buttons=(1, 0))
RIGHT_BUTTON = SpaceMouseState(buttons=(0, 1))
OBS = Observation(images={})


def test_readings_inside_the_dead_zone_give_no_motion():
    mapping = SpaceMouseMapping(dead_zone=0.1)
    action = mapping.action(IDLE_NOISE)
    assert np.allclose(action[:6], 0.0)
    assert action[6] == 1.0  # gripper starts open
    assert not mapping.is_active(IDLE_NOISE)


def test_dead_zone_is_removed_and_the_rest_rescaled():
    mapping = SpaceMouseMapping(dead_zone=0.1)
    action = mapping.action(PUSH_FORWARD)
    assert action[0] == pytest.approx((0.82 - 0.1) / 0.9)
    assert np.allclose(action[1:6], 0.0)


def test_axes_follow_the_robot_frame_and_scale():
    mapping = SpaceMouseMapping(dead_zone=0.1, translation_scale=0.5)
    action = mapping.action(PUSH_RIGHT_AND_DOWN)
    assert action[1] == pytest.approx(-0.5 * (0.55 - 0.1) / 0.9)  # right on the cap = -y of the robot
    assert action[2] == pytest.approx(-0.5)  # full push down, scaled
    rot = SpaceMouseMapping(dead_zone=0.1, rotation_scale=0.5).action(TWIST)
    assert rot[5] == pytest.approx(-0.5 * (0.6 - 0.1) / 0.9)


def test_actions_are_clipped_to_the_action_space():
    action = SpaceMouseMapping(dead_zone=0.0, translation_scale=3.0).action(PUSH_FORWARD)
    assert action[0] == 1.0


def test_left_button_closes_and_right_opens_and_the_state_latches():
    mapping = SpaceMouseMapping()
    assert mapping.action(LEFT_BUTTON)[6] == -1.0
    assert mapping.action(IDLE_NOISE)[6] == -1.0
    assert mapping.action(RIGHT_BUTTON)[6] == 1.0
    assert mapping.is_active(LEFT_BUTTON)


def test_bad_dead_zone_is_refused():
    with pytest.raises(ValueError, match="dead_zone"):
        SpaceMouseMapping(dead_zone=1.5)


def test_input_overrides_the_policy_for_half_a_second():
    now = [100.0]
    states = iter([PUSH_FORWARD, IDLE_NOISE, IDLE_NOISE, IDLE_NOISE])
    base = RandomPolicy(7, seed=1)
    teleop = SpaceMouseTeleop(lambda: next(states), base=base, clock=lambda: now[0])
    first = teleop.act(OBS)
    assert first[0] > 0.7 and teleop.overriding
    now[0] += 0.3
    held = teleop.act(OBS)  # within 0.5 s: the operator still owns the robot, it holds still
    assert np.allclose(held[:6], 0.0)
    now[0] += 0.3  # 0.6 s after the last input: the policy is back
    resumed = teleop.act(OBS)
    assert not teleop.overriding
    assert not np.allclose(resumed[:6], 0.0)


def test_idle_device_leaves_the_base_policy_in_charge():
    teleop = SpaceMouseTeleop(lambda: IDLE_NOISE, base=HoldPolicy(7))
    assert np.allclose(teleop.act(OBS), [0, 0, 0, 0, 0, 0, 1])


def test_a_missing_device_gives_a_clear_message():
    with pytest.raises(SpaceMouseUnavailable, match="SpaceMouse|HID|pyspacemouse"):
        SpaceMouseDevice().open()
