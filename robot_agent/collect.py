"""Scripted PickCube episodes collected in-process (no server): the demo's training data. No Django."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .maniskill_robot import JOINT_POS, ManiSkillRobot
from .policies import ScriptedPickCubePolicy
from .robot import Observation


@dataclass
class CollectedEpisode:
    seed: int
    observations: list[Observation]  # N+1: the reset observation first
    actions: list[np.ndarray]  # N
    perturbed: bool = False
    cube_heights: list[float] = field(default_factory=list)  # N+1: the cube's height (m) from the env state

    @property
    def grasped(self) -> list[bool]:
        return [bool(o.info.get("is_grasped", False)) for o in self.observations]

    @property
    def first_success(self) -> int | None:
        return next((i for i, o in enumerate(self.observations) if o.success), None)


def cube_height(robot: ManiSkillRobot) -> float:
    """The cube's height above the table (m, its centre) in PickCube's state; NaN for an env without a cube."""
    cube = getattr(getattr(robot.env, "unwrapped", None), "cube", None)
    if cube is None:
        return float("nan")
    return float(np.asarray(cube.pose.p).reshape(-1, 3)[0, 2])


def open_gripper_plan(plan: list[np.ndarray]) -> list[np.ndarray]:
    """The same arm motion with the gripper kept as open as at the start: the grasp misses, nothing is lifted."""
    if not plan:
        return plan
    opened = float(plan[0][-1])
    perturbed = []
    for action in plan:
        action = np.array(action, copy=True)
        action[-1] = opened
        perturbed.append(action)
    return perturbed


def collect_scripted(
    seeds: list[int],
    *,
    size: int = 64,
    hold_steps: int = 12,
    env_id: str = "PickCube-v1",
    perturb: set[int] | frozenset[int] = frozenset(),
) -> Iterator[CollectedEpisode]:
    """One episode per seed: ManiSkill's pick-cube plan, then `hold_steps` more steps holding the cube still.

    Seeds in `perturb` play the plan with the gripper held open (a failed grasp: a failure episode)."""
    policy = ScriptedPickCubePolicy(env_id)
    robot = ManiSkillRobot(env_id, control_mode=JOINT_POS, width=size, height=size, max_episode_steps=400)
    with robot:
        for seed in seeds:
            policy.reset(seed)
            if seed in perturb:
                policy.plan = open_gripper_plan(policy.plan)
            obs = robot.reset(seed=seed)
            observations, actions, heights = [obs], [], [cube_height(robot)]
            for _ in range(len(policy.plan) + hold_steps):
                action = policy.act(obs)
                obs = robot.send_action(action)
                observations.append(obs)
                actions.append(action)
                heights.append(cube_height(robot))
            yield CollectedEpisode(seed, observations, actions, perturbed=seed in perturb, cube_heights=heights)
