"""Which steps of an RL episode succeeded, from what the transitions carry (numpy only).

DI-engine's policies keep `obs`, `next_obs`, `action`, `reward` and `done` in a transition (no `info`), so
the env's success flag is often not there. A rule says where success comes from:

- `auto`: `info['success']` (or a `success` key) when the transitions carry one, else none;
- `info`: `info['success']` (or `success`), which the transitions must carry;
- `reward>=X`: the env reward of the step is at least X;
- `done_reward>=X`: the env reward is at least X at a done step (the episode's last);
- `return>=X`: the episode's summed env reward is at least X at its done step;
- `none`: no step succeeds (uploads carry no success; a retrain then has no success labels of its own).

The env reward is the transition's own (`env_reward` where an adapter kept it before replacing `reward`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .arrays import scalar

RULES = ("auto", "info", "none", "reward", "done_reward", "return")
_THRESHOLD = re.compile(r"^\s*(reward|done_reward|return)\s*>=\s*(-?[0-9.]+(?:e-?[0-9]+)?)\s*$")


@dataclass(frozen=True)
class SuccessRule:
    kind: str  # one of RULES
    threshold: float = 0.0

    def __str__(self) -> str:
        return f"{self.kind}>={self.threshold:g}" if self.kind in ("reward", "done_reward", "return") else self.kind

    @property
    def labels(self) -> bool:
        """Whether the rule can say success at all (`auto` before it is resolved counts as yes)."""
        return self.kind != "none"

    def resolved(self, transitions: list[dict]) -> SuccessRule:
        """`auto` made `info` when any of the transitions carries a success flag, else `none`; others as they are."""
        if self.kind != "auto":
            return self
        return SuccessRule("info") if any(has_success_flag(t) for t in transitions) else SuccessRule("none")

    def flags(self, episode: list[dict]) -> list[bool]:
        """Per transition of one episode (in order): whether its reached state (`next_obs`) succeeded."""
        if self.kind in ("info", "auto"):
            return [success_flag(t) for t in episode]
        if self.kind == "none":
            return [False] * len(episode)
        rewards = [env_reward(t) for t in episode]
        if self.kind == "reward":
            return [r >= self.threshold for r in rewards]
        dones = [done(t) for t in episode]
        if self.kind == "done_reward":
            return [d and r >= self.threshold for d, r in zip(dones, rewards, strict=True)]
        total, out = 0.0, []
        for d, r in zip(dones, rewards, strict=True):
            total += r
            out.append(d and total >= self.threshold)
        return out

    def per_transition(self, transitions: list[dict]) -> list[bool] | None:
        """Each transition's success on its own, where the rule can tell it without the rest of its episode
        (info, reward>=X, done_reward>=X); None for `return>=X` and `none`."""
        if self.kind in ("return", "none"):
            return None
        return [flag for t in transitions for flag in self.flags([t])]


def success_rule(value: Any) -> SuccessRule:
    """A rule from its text (`auto`, `info`, `none`, `reward>=1`, `done_reward>=1`, `return>=195`)."""
    if isinstance(value, SuccessRule):
        return value
    text = str(value).strip()
    if text in ("auto", "info", "none"):
        return SuccessRule(text)
    match = _THRESHOLD.match(text)
    if match is None:
        raise ValueError(
            f"success_rule {value!r} is not one of: auto, info, none, reward>=X, done_reward>=X, return>=X "
            "(e.g. 'done_reward>=1': the env reward is at least 1 at a done step)"
        )
    return SuccessRule(match[1], float(match[2]))


def has_success_flag(transition: dict) -> bool:
    info = transition.get("info")
    return "success" in transition or (isinstance(info, dict) and "success" in info)


def success_flag(transition: dict) -> bool:
    info = transition.get("info")
    if isinstance(info, dict) and "success" in info:
        return bool(scalar(info["success"]))
    return bool(scalar(transition.get("success", False)))


def env_reward(transition: dict, key: str = "env_reward") -> float:
    """The env's own reward of a transition (`key` where an adapter kept it, else `reward`)."""
    return float(scalar(transition[key] if key in transition else transition.get("reward", 0.0)))


def done(transition: dict) -> bool:
    return bool(scalar(transition.get("done", False)))
