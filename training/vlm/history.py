"""Per-stream window buffers for `history_vlm` (RLinf's newer name: `buffered_vlm`) reward inference.

Each stream keeps the last `history_size` steps of both views. Once `min_history_size` steps exist, a
window is scored every `input_interval` steps; a buffer shorter than `history_size` is front-padded by
repeating its oldest step so the model always sees `history_size` frames per view. Steps without a
window get `interval_reward`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .data import TrendWindow

REWARD_MODES = ("history_vlm", "buffered_vlm")


@dataclass(frozen=True)
class HistoryConfig:
    history_size: int = 5
    min_history_size: int = 5
    input_interval: int = 1
    interval_reward: float = 0.0

    def __post_init__(self) -> None:
        if self.history_size < 1 or self.input_interval < 1:
            raise ValueError("history_size and input_interval must be >= 1")
        if not 1 <= self.min_history_size <= self.history_size:
            raise ValueError("min_history_size must be between 1 and history_size")

    @classmethod
    def from_dict(cls, data: dict | None) -> HistoryConfig:
        data = data or {}
        try:
            return cls(
                history_size=int(data.get("history_size", 5)),
                min_history_size=int(data.get("min_history_size", data.get("history_size", 5))),
                input_interval=int(data.get("input_interval", 1)),
                interval_reward=float(data.get("interval_reward", 0.0)),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad history settings: {exc}") from None


class WindowHistory:
    """The buffer of one stream (one env of one RL worker, or one teleop session)."""

    def __init__(self, config: HistoryConfig):
        self.config = config
        self.main: deque[np.ndarray] = deque(maxlen=config.history_size)
        self.extra: deque[np.ndarray] = deque(maxlen=config.history_size)
        self.steps = 0

    def reset(self) -> None:
        self.main.clear()
        self.extra.clear()
        self.steps = 0

    def push(self, main: np.ndarray, extra: np.ndarray) -> TrendWindow | None:
        """Add one step; the window to score now, or None (the step gets `interval_reward`)."""
        self.main.append(main)
        self.extra.append(extra)
        self.steps += 1
        cfg = self.config
        if self.steps < cfg.min_history_size or (self.steps - cfg.min_history_size) % cfg.input_interval:
            return None
        pad = cfg.history_size - len(self.main)
        main_frames = [self.main[0]] * pad + list(self.main)
        extra_frames = [self.extra[0]] * pad + list(self.extra)
        return TrendWindow(main_frames, extra_frames, meta={"end_step": self.steps - 1})
