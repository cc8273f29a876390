"""The corridor: a tiny image task with a sparse success that shows in the frame, for bench/rl_loop.py.

A row of CELLS cells across a 32x32 RGB frame; the agent (a green block) starts in the left-most cell and moves
left (action 0) or right (action 1); the goal is the right-most cell, marked by a yellow floor. Success is the
agent standing on the goal (the frame shows it: the green block over the yellow floor); the episode ends there,
or after MAX_STEPS steps. A random policy succeeds in about 9% of its episodes; always moving right, in all.
The env's own reward is 1 at success and 0 otherwise. Dark noise, drawn from the episode's seed, makes every
frame different.

A gymnasium env (numpy and gymnasium only): the main environment collects with it, and the interop environment
(DI-engine 0.5.3, bench/interop/rl_loop_ding.py) wraps it, so both see the same frames for the same seeds.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

SIZE = 32
CELLS = 7
MAX_STEPS = 10
CELL_PX = SIZE // (CELLS + 1)  # 4 px; the right-most 4 px stay empty
AGENT = (40, 220, 40)
GOAL = (230, 200, 30)


def render(position: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 [SIZE, SIZE, 3]: dark noise, the goal's yellow floor, the agent's block in its cell."""
    frame = rng.integers(0, 40, (SIZE, SIZE, 3), dtype=np.uint8)
    goal = (CELLS - 1) * CELL_PX
    frame[22:26, goal : goal + CELL_PX] = GOAL
    left = position * CELL_PX
    frame[12:22, left : left + CELL_PX] = AGENT
    return frame


class Corridor(gym.Env):
    """Observations uint8 [32, 32, 3]; actions 0 (left) and 1 (right); info["success"] at every step."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self._rng = np.random.default_rng(0)
        self.position, self.steps = 0, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.position, self.steps = 0, 0
        return render(self.position, self._rng), {"success": False}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        move = 1 if int(np.asarray(action).reshape(-1)[0]) == 1 else -1
        self.position = min(CELLS - 1, max(0, self.position + move))
        self.steps += 1
        success = self.position == CELLS - 1
        truncated = not success and self.steps >= MAX_STEPS
        return render(self.position, self._rng), float(success), success, truncated, {"success": success}
