"""Trend label -> reward (formats.md section 4): a label mapping plus an optional success bonus."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .labels import INVALID, LABELS


def default_label_rewards() -> dict[str, float]:
    return {"positive": 1.0, "negative": -0.2, "unclear": 0.0, INVALID: 0.0}


@dataclass(frozen=True)
class TrendRewardConfig:
    label_rewards: dict[str, float] = field(default_factory=default_label_rewards)
    gt_success_bonus: float = 0.0

    def __post_init__(self) -> None:
        missing = set(LABELS) - set(self.label_rewards)
        if missing:
            raise ValueError(f"label_rewards misses {sorted(missing)}")
        unknown = set(self.label_rewards) - {*LABELS, INVALID}
        if unknown:
            raise ValueError(f"label_rewards has unknown labels {sorted(unknown)}")
        merged = {INVALID: 0.0, **{k: float(v) for k, v in self.label_rewards.items()}}
        object.__setattr__(self, "label_rewards", merged)
        object.__setattr__(self, "gt_success_bonus", float(self.gt_success_bonus))

    @classmethod
    def from_dict(cls, data: dict | None) -> TrendRewardConfig:
        data = dict(data or {})
        rewards = {**default_label_rewards(), **(data.get("label_rewards") or {})}
        return cls(label_rewards=rewards, gt_success_bonus=data.get("gt_success_bonus", 0.0))


def trend_reward(label: str, *, config: TrendRewardConfig, env_success: bool = False) -> float:
    """Reward for one window: the label's value plus `gt_success_bonus` when the env reports success."""
    base = config.label_rewards.get(label, config.label_rewards[INVALID])
    return base + (config.gt_success_bonus if env_success else 0.0)


def label_from_probabilities(probabilities) -> str:
    """The most likely label of a probability vector ordered as LABELS."""
    return LABELS[int(np.argmax(np.asarray(probabilities)))]
