"""The robot interface every robot implements (LeRobot style): connect, observe, act, disconnect."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Observation:
    """What the robot reports after a reset or a step. Images are uint8 HxWx3 RGB, one per camera."""

    images: dict[str, np.ndarray]
    reward: float = 0.0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    info: dict = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class RobotError(RuntimeError):
    """The robot cannot be used (missing driver, library or device); the message says what to do."""


class Robot(ABC):
    """A robot or simulator. Use as a context manager: `with robot: obs = robot.reset()`."""

    #: camera names as the server's project knows them (e.g. ["main", "extra"])
    cameras: list[str]
    #: length of the action vector send_action expects
    action_dim: int
    #: "sim" or "robot" (the server stores it as the episode source)
    source: str = "sim"
    env_id: str = ""

    @abstractmethod
    def connect(self) -> None: ...

    @abstractmethod
    def disconnect(self) -> None: ...

    @abstractmethod
    def reset(self, seed: int | None = None) -> Observation:
        """Start a new episode and return its first observation."""

    @abstractmethod
    def get_observation(self) -> Observation: ...

    @abstractmethod
    def send_action(self, action: np.ndarray) -> Observation:
        """Apply one action (one control period) and return the observation that follows."""

    def __enter__(self) -> Robot:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()
