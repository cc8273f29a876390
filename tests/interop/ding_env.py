"""A tiny image-producing env for DI-engine (imported in the interop environment only, through `import_names`).

`reach`: the agent (a green block) starts at the left of a row of cells and moves left (action 0) or right
(action 1); reaching the right-most cell succeeds, and the frame then shows a big red square. Observations are
float32 [3, 32, 32] frames in [0, 1], channels first, as DI-engine's image envs and conv encoders take them.
The env's own reward is a constant -1 per step, so a reward the policy trains on that is not -1 came from
somewhere else.

`reach_stack`: the same task as Atari-style observations: float32 [4, 32, 32] stacks of grayscale frames in
[0, 1], the newest last (as DI-engine's `FrameStackWrapper` gives them), no `success` in its info (Atari envs
have none) and an env reward of 1 at the step that reaches the goal, 0 otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ding.envs import BaseEnv, BaseEnvTimestep
from ding.utils import ENV_REGISTRY
from gym import spaces

SIZE = 32
CELLS = 4
ENV_REWARD = -1.0


def render(position: int, success: bool, noise: np.random.Generator) -> np.ndarray:
    """[3, SIZE, SIZE] float32 in [0, 1]: dark noise, the agent's block, a red square once it succeeded."""
    frame = noise.random((SIZE, SIZE, 3), dtype=np.float32) * 0.2
    width = SIZE // CELLS
    frame[24:30, position * width + 1 : (position + 1) * width - 1] = (0.1, 0.9, 0.1)
    if success:
        frame[4:20, 8:24] = (0.9, 0.15, 0.15)
    return np.ascontiguousarray(frame.transpose(2, 0, 1))


def render_gray(position: int, success: bool, noise: np.random.Generator) -> np.ndarray:
    """[SIZE, SIZE] float32 in [0, 1]: the RGB frame's content as one grayscale frame."""
    frame = noise.random((SIZE, SIZE), dtype=np.float32) * 0.2
    width = SIZE // CELLS
    frame[24:30, position * width + 1 : (position + 1) * width - 1] = 0.6
    if success:
        frame[4:20, 8:24] = 0.95
    return frame


@ENV_REGISTRY.register("reward_studio_reach")
class ReachEnv(BaseEnv):
    config = dict(max_steps=6)

    def __init__(self, cfg: dict) -> None:
        self._cfg = cfg
        self._max_steps = int(cfg.get("max_steps", 6))
        self._rng = np.random.default_rng(0)
        self._position, self._steps, self._return = 0, 0, 0.0
        self._observation_space = spaces.Box(0.0, 1.0, (3, SIZE, SIZE), np.float32)
        self._action_space = spaces.Discrete(2)
        self._reward_space = spaces.Box(ENV_REWARD, ENV_REWARD, (1,), np.float32)

    def seed(self, seed: int, dynamic_seed: bool = False) -> None:
        self._rng = np.random.default_rng(seed)

    def reset(self) -> np.ndarray:
        self._position, self._steps, self._return = 0, 0, 0.0
        return self._observe(False)

    def _observe(self, success: bool) -> np.ndarray:
        return render(self._position, success, self._rng)

    def _outcome(self, success: bool) -> tuple[float, dict]:
        """The env reward and info of a step."""
        return ENV_REWARD, {"success": success}

    def step(self, action: Any) -> BaseEnvTimestep:
        move = 1 if int(np.asarray(action).reshape(-1)[0]) == 1 else -1
        self._position = min(CELLS - 1, max(0, self._position + move))
        self._steps += 1
        success = self._position == CELLS - 1
        done = success or self._steps >= self._max_steps
        reward, info = self._outcome(success)
        self._return += reward
        if done:
            info["eval_episode_return"] = self._return
        return BaseEnvTimestep(self._observe(success), np.array([reward], np.float32), done, info)

    def close(self) -> None:
        pass

    @property
    def observation_space(self) -> spaces.Space:
        return self._observation_space

    @property
    def action_space(self) -> spaces.Space:
        return self._action_space

    @property
    def reward_space(self) -> spaces.Space:
        return self._reward_space

    def __repr__(self) -> str:
        return "ReachEnv()"


STACK = 4


@ENV_REGISTRY.register("reward_studio_reach_stack")
class ReachStackEnv(ReachEnv):
    def __init__(self, cfg: dict) -> None:
        super().__init__(cfg)
        self._stack: list[np.ndarray] = []
        self._observation_space = spaces.Box(0.0, 1.0, (STACK, SIZE, SIZE), np.float32)
        self._reward_space = spaces.Box(0.0, 1.0, (1,), np.float32)

    def reset(self) -> np.ndarray:
        self._stack = []
        return super().reset()

    def _observe(self, success: bool) -> np.ndarray:
        frame = render_gray(self._position, success, self._rng)
        self._stack = (self._stack or [frame] * STACK)[1:] + [frame]  # the reset frame fills the stack
        return np.stack(self._stack).astype(np.float32)

    def _outcome(self, success: bool) -> tuple[float, dict]:
        return (1.0 if success else 0.0), {}

    def __repr__(self) -> str:
        return "ReachStackEnv()"
