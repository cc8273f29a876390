"""Policies: what action to send next. Teleop policies read a human device; others are scripted."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .robot import Observation
from .spacemouse import GRIPPER_CLOSED, GRIPPER_OPEN, SpaceMouseMapping, SpaceMouseState

if TYPE_CHECKING:
    from .replay_robot import ReplayRobot


class Policy(abc.ABC):
    name = "policy"
    #: ManiSkill control mode this policy's actions are meant for
    control_mode = "pd_ee_delta_pose"

    def reset(self, seed: int | None = None) -> None:
        pass

    @abc.abstractmethod
    def act(self, obs: Observation) -> np.ndarray:
        """The action for this observation."""

    def on_keys(self, keys: list[str]) -> None:
        """Key presses since the last step (keyboard teleop uses them)."""

    def close(self) -> None:
        pass


class HoldPolicy(Policy):
    """Zero motion, gripper open: what the robot does when no one drives."""

    name = "hold"

    def __init__(self, action_dim: int = 7):
        self.action_dim = action_dim

    def act(self, obs: Observation) -> np.ndarray:
        action = np.zeros(self.action_dim, dtype=np.float32)
        if self.action_dim:
            action[-1] = GRIPPER_OPEN
        return action


class RandomPolicy(Policy):
    name = "random"

    def __init__(self, action_dim: int = 7, seed: int | None = 0):
        self.action_dim = action_dim
        self.rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def act(self, obs: Observation) -> np.ndarray:
        return self.rng.uniform(-1, 1, self.action_dim).astype(np.float32)


class ScriptedPickCubePolicy(Policy):
    """ManiSkill's motion-planning solution for PickCube, planned at reset and played step by step."""

    name = "scripted"
    control_mode = "pd_joint_pos"

    def __init__(self, env_id: str = "PickCube-v1", planner: Callable | None = None):
        from .maniskill_robot import plan_pick_cube

        self.env_id = env_id
        self.planner = planner or plan_pick_cube
        self.plan: list[np.ndarray] = []
        self.cursor = 0

    def reset(self, seed: int | None = None) -> None:
        self.plan = self.planner(self.env_id, seed)
        self.cursor = 0

    @property
    def finished(self) -> bool:
        return self.cursor >= len(self.plan)

    def act(self, obs: Observation) -> np.ndarray:
        if not self.plan:
            raise RuntimeError("the scripted policy has no plan: call reset(seed) with the robot's seed")
        action = self.plan[min(self.cursor, len(self.plan) - 1)]
        self.cursor += 1
        return action


class ReplayPolicy(Policy):
    """Sends the actions stored in a replayed episode."""

    name = "replay"

    def __init__(self, robot: ReplayRobot) -> None:
        self.robot = robot

    def act(self, obs: Observation) -> np.ndarray:
        return self.robot.recorded_action()


# Keyboard teleop: keys avoid the operator's c (success), a (fail) and r (reset).
KEYBOARD_AXES = {
    "i": (0, 1.0),
    "k": (0, -1.0),
    "j": (1, 1.0),
    "l": (1, -1.0),
    "u": (2, 1.0),
    "o": (2, -1.0),
}


class KeyboardTeleop(Policy):
    """i/k forward/back, j/l left/right, u/o up/down, g toggles the gripper. A press moves for `hold_s`."""

    name = "keyboard"

    def __init__(self, step: float = 1.0, hold_s: float = 0.2, clock: Callable[[], float] = time.monotonic):
        self.step = step
        self.hold_s = hold_s
        self.clock = clock
        self.motion = np.zeros(6, dtype=np.float32)
        self.until = 0.0
        self.gripper = GRIPPER_OPEN

    def on_keys(self, keys: list[str]) -> None:
        for key in keys:
            if key in KEYBOARD_AXES:
                axis, sign = KEYBOARD_AXES[key]
                if self.clock() > self.until:
                    self.motion[:] = 0
                self.motion[axis] = sign * self.step
                self.until = self.clock() + self.hold_s
            elif key == "g":
                self.gripper = GRIPPER_CLOSED if self.gripper == GRIPPER_OPEN else GRIPPER_OPEN

    def act(self, obs: Observation) -> np.ndarray:
        motion = self.motion if self.clock() <= self.until else np.zeros(6, dtype=np.float32)
        return np.array([*motion, self.gripper], dtype=np.float32)


class SpaceMouseTeleop(Policy):
    """SpaceMouse input overrides the base policy; the base policy resumes `override_s` after the last input.

    `read` returns a SpaceMouseState (a SpaceMouseDevice's read, or recorded states in tests).
    """

    name = "spacemouse"

    def __init__(
        self,
        read: Callable[[], SpaceMouseState],
        base: Policy | None = None,
        mapping: SpaceMouseMapping | None = None,
        override_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        on_close: Callable[[], None] | None = None,
    ):
        self.read = read
        self.base = base or HoldPolicy(7)
        self.mapping = mapping or SpaceMouseMapping()
        self.override_s = override_s
        self.clock = clock
        self.last_input = -float("inf")
        self.on_close = on_close
        self.control_mode = self.base.control_mode

    @property
    def overriding(self) -> bool:
        return self.clock() - self.last_input < self.override_s

    def reset(self, seed: int | None = None) -> None:
        self.base.reset(seed)
        self.last_input = -float("inf")

    def on_keys(self, keys: list[str]) -> None:
        self.base.on_keys(keys)

    def act(self, obs: Observation) -> np.ndarray:
        state = self.read()
        if self.mapping.is_active(state):
            self.last_input = self.clock()
            return self.mapping.action(state)
        if self.overriding:
            return self.mapping.action(state)  # still the operator's turn: hold still, keep the gripper
        return self.base.act(obs)

    def close(self) -> None:
        if self.on_close:
            self.on_close()
