"""A robot that plays a stored episode back as if it were live (demos, tests, benchmarks).

Episodes are `.npz` files: `<camera>` arrays uint8 [T,H,W,3] for each camera, `actions` float [T,A]
(row 0, the reset step, is ignored), `rewards` [T], `success` bool [T]; `cameras` lists the names.
The agent writes such files with `--save-dir`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .robot import Observation, Robot, RobotError


class ReplayRobot(Robot):
    source = "sim"

    def __init__(self, episode: dict[str, np.ndarray], *, env_id: str = "replay", loop: bool = True):
        self.cameras = [str(c) for c in episode["cameras"]]
        self.frames = {camera: np.asarray(episode[camera], dtype=np.uint8) for camera in self.cameras}
        self.length = len(next(iter(self.frames.values())))
        self.actions = np.asarray(episode.get("actions", np.zeros((self.length, 0))), dtype=np.float32)
        self.rewards = np.asarray(episode.get("rewards", np.zeros(self.length)), dtype=np.float32)
        self.successes = np.asarray(episode.get("success", np.zeros(self.length, dtype=bool)), dtype=bool)
        self.action_dim = int(self.actions.shape[1]) if self.actions.ndim == 2 else 0
        self.env_id = env_id
        self.loop = loop
        self.index = 0
        self.connected = False

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ReplayRobot:
        path = Path(path)
        if not path.is_file():
            raise RobotError(f"no episode file at {path}")
        with np.load(path, allow_pickle=False) as data:
            return cls({key: data[key] for key in data.files}, env_id=kwargs.pop("env_id", path.stem), **kwargs)

    def connect(self) -> None:
        self.connected = True

    def disconnect(self) -> None:
        self.connected = False

    def _observation(self) -> Observation:
        i = self.index
        last = i >= self.length - 1
        return Observation(
            images={camera: self.frames[camera][i] for camera in self.cameras},
            reward=float(self.rewards[i]),
            success=bool(self.successes[i]),
            truncated=last,
            info={"replay_index": i},
        )

    def reset(self, seed: int | None = None) -> Observation:
        self.index = 0
        return self._observation()

    def get_observation(self) -> Observation:
        return self._observation()

    def recorded_action(self) -> np.ndarray:
        """The action stored for the next step (what the replay policy sends)."""
        nxt = min(self.index + 1, self.length - 1)
        return self.actions[nxt] if self.action_dim else np.zeros(0, dtype=np.float32)

    def send_action(self, action: np.ndarray) -> Observation:
        self.index = min(self.index + 1, self.length - 1)
        return self._observation()


def synthetic_episode(
    length: int = 40, size: int = 64, cameras: tuple[str, ...] | list[str] = ("main", "extra")
) -> dict[str, np.ndarray]:
    """A made-up episode: a red square rises over the frames; success in the last quarter."""
    frames = np.zeros((length, size, size, 3), dtype=np.uint8)
    frames[..., 2] = 90
    side = max(4, size // 6)
    for t in range(length):
        top = int((size - side) * (1 - t / max(1, length - 1)))
        frames[t, top : top + side, size // 2 - side // 2 : size // 2 + side // 2 + 1] = (220, 30, 30)
    success = np.arange(length) >= int(length * 0.75)
    episode: dict[str, np.ndarray] = {
        camera: frames if i == 0 else frames[:, ::-1].copy() for i, camera in enumerate(cameras)
    }
    episode.update(
        cameras=np.array(cameras),
        actions=np.zeros((length, 7), dtype=np.float32),
        rewards=np.linspace(0, 1, length, dtype=np.float32),
        success=success,
    )
    return episode


def save_episode(path: str | Path, observations: list[Observation], actions: list[np.ndarray]) -> Path:
    """Write an episode recorded by the agent as a replayable `.npz`."""
    cameras = list(observations[0].images)
    width = max((len(a) for a in actions), default=0)
    rows = [np.zeros(width, np.float32)] + [np.pad(np.asarray(a, np.float32), (0, width - len(a))) for a in actions]
    data = {camera: np.stack([o.images[camera] for o in observations]) for camera in cameras}
    data.update(
        cameras=np.array(cameras),
        actions=np.stack(rows[: len(observations)]),
        rewards=np.array([o.reward for o in observations], np.float32),
        success=np.array([o.success for o in observations], bool),
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **data)
    return path
