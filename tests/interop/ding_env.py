"""A tiny image-producing env for DI-engine (imported in the interop environment only, through `import_names`).

`reach`: the agent (a green block) starts at the left of a row of cells and moves left (action 0) or right
(action 1); reaching the right-most cell succeeds, and the frame then shows a big red square. Observations are
float32 [3, 32, 32] frames in [0, 1], channels first, as DI-engine's image envs and conv encoders take them.
The env's own reward is a constant -1 per step, so a reward the policy trains on that is not -1 came from
somewhere else.
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
        return render(self._position, False, self._rng)

    def step(self, action: Any) -> BaseEnvTimestep:
        move = 1 if int(np.asarray(action).reshape(-1)[0]) == 1 else -1
        self._position = min(CELLS - 1, max(0, self._position + move))
        self._steps += 1
        success = self._position == CELLS - 1
        done = success or self._steps >= self._max_steps
        self._return += ENV_REWARD
        info: dict = {"success": success}
        if done:
            info["eval_episode_return"] = self._return
        obs = render(self._position, success, self._rng)
        return BaseEnvTimestep(obs, np.array([ENV_REWARD], np.float32), done, info)

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
