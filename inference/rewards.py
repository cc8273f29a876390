"""Rewards at RL time from model probabilities (shared/reference/formats.md section 5). No Django.

For every item of a request Reward Studio returns three things, all explicit:
- `probability`: the raw model probability (None when the reward mode did not score the item);
- `success`: `probability > threshold` (None when not scored);
- `reward`: `env_reward_weight * env_reward + reward_weight * model_output`, where `model_output` is
  `success_reward` / `fail_reward` (binary) or the probability itself (soft).

Reward modes decide which items the model scores:
- `per_step`: every item.
- `terminal`: only items whose `done` flag is set (the final observation); every other item's
  model_output is 0.0, so the model's reward lands on the done step and nowhere else.
- `history_buffer`: each stream (one per item index of a parallel-env batch) counts the steps in its
  buffer since its last reset; a step is scored once `min_history_size` steps exist and then every
  `input_interval` steps (`(count - min_history_size) % input_interval == 0`). Unscored steps get
  `interval_reward` (0.0) as model_output. A done step resets its stream after being scored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

PER_STEP = "per_step"
TERMINAL = "terminal"
HISTORY_BUFFER = "history_buffer"
REWARD_MODES = (PER_STEP, TERMINAL, HISTORY_BUFFER)
BINARY = "binary"
SOFT = "soft"
REWARD_TYPES = (BINARY, SOFT)


class RewardSettingsError(ValueError):
    """A reward setting that cannot be used; the message names the field."""


@dataclass(frozen=True)
class RewardSettings:
    reward_mode: str = PER_STEP
    threshold: float = 0.5
    reward_type: str = BINARY
    success_reward: float = 1.0
    fail_reward: float = 0.0
    env_reward_weight: float = 0.0
    reward_weight: float = 1.0
    history_size: int = 5
    min_history_size: int = 1
    input_interval: int = 1
    interval_reward: float = 0.0

    def __post_init__(self) -> None:
        if self.reward_mode not in REWARD_MODES:
            raise RewardSettingsError(f"reward_mode must be one of {', '.join(REWARD_MODES)}, got {self.reward_mode!r}")
        if self.reward_type not in REWARD_TYPES:
            raise RewardSettingsError(f"reward_type must be one of {', '.join(REWARD_TYPES)}, got {self.reward_type!r}")
        for name in ("threshold", "success_reward", "fail_reward", "env_reward_weight", "reward_weight"):
            if not math.isfinite(float(getattr(self, name))):
                raise RewardSettingsError(f"{name} must be a finite number")
        if not 0.0 <= self.threshold <= 1.0:
            raise RewardSettingsError(f"threshold must be between 0 and 1, got {self.threshold}")
        if self.history_size < 1 or self.min_history_size < 1 or self.input_interval < 1:
            raise RewardSettingsError("history_size, min_history_size and input_interval must be at least 1")
        if self.min_history_size > self.history_size:
            raise RewardSettingsError("min_history_size cannot exceed history_size")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ItemReward:
    probability: float | None
    success: bool | None
    reward: float
    scored: bool


def model_output(probability: float, settings: RewardSettings) -> float:
    """What the model contributes for a scored item: binary reward by threshold, or the probability."""
    if settings.reward_type == SOFT:
        return float(probability)
    return settings.success_reward if probability > settings.threshold else settings.fail_reward


def combine(env_reward: float, output: float, settings: RewardSettings) -> float:
    return settings.env_reward_weight * float(env_reward) + settings.reward_weight * float(output)


def history_step(count: int, settings: RewardSettings) -> tuple[bool, int]:
    """(scored, count after this step) for a stream whose buffer held `count` steps before it."""
    count += 1
    scored = count >= settings.min_history_size and (count - settings.min_history_size) % settings.input_interval == 0
    return scored, count


def plan_scoring(
    settings: RewardSettings, n: int, dones: Sequence[bool] | None = None, history: Sequence[int] | None = None
) -> tuple[list[bool], list[int] | None]:
    """Which of `n` items the model must score, and the streams' new history counts (history_buffer).

    `history` is the per-item buffer count before this step (history_buffer mode only).
    """
    dones = list(dones) if dones is not None else [False] * n
    if settings.reward_mode == PER_STEP:
        return [True] * n, None
    if settings.reward_mode == TERMINAL:
        return [bool(d) for d in dones], None
    counts = list(history) if history is not None else [0] * n
    scored, after = [], []
    for count, done in zip(counts, dones, strict=True):
        is_scored, count = history_step(count, settings)
        scored.append(is_scored)
        after.append(0 if done else count)
    return scored, after


def compute_rewards(
    settings: RewardSettings,
    probabilities: Sequence[float | None],
    *,
    scored: Sequence[bool] | None = None,
    env_rewards: Sequence[float] | None = None,
) -> list[ItemReward]:
    """One ItemReward per item. `probabilities[i]` may be None where `scored[i]` is False."""
    n = len(probabilities)
    scored = list(scored) if scored is not None else [True] * n
    env_rewards = list(env_rewards) if env_rewards is not None else [0.0] * n
    if not len(scored) == len(env_rewards) == n:
        raise ValueError("probabilities, scored and env_rewards must have the same length")
    unscored_output = settings.interval_reward if settings.reward_mode == HISTORY_BUFFER else 0.0
    items = []
    for probability, is_scored, env_reward in zip(probabilities, scored, env_rewards, strict=True):
        if is_scored:
            if probability is None:
                raise ValueError("a scored item needs a probability")
            p = float(probability)
            items.append(
                ItemReward(p, p > settings.threshold, combine(env_reward, model_output(p, settings), settings), True)
            )
        else:
            items.append(ItemReward(None, None, combine(env_reward, unscored_output, settings), False))
    return items
