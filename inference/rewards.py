"""Rewards at RL time from model probabilities, with RLinf's semantics (formats.md section 5). No Django.

For every item of a request Reward Studio returns, all explicit:
- `probability`: the raw model probability (None when the reward mode did not score the item);
- `success`: `probability > threshold` (None when not scored);
- `model_output`: what the model contributes, RLinf's "reward model output":
  `binary` -> `success_reward` / `fail_reward` by threshold; `soft` -> the probability;
  `thresholded` -> RLinf's `ResNetRewardModel.compute_reward`: the probability, zeroed at or below
  `threshold` (`reward.model.reward_threshold`). Unscored items get `interval_reward` (history_buffer) or
  0.0. Then `gt_success_bonus` is added where the env reports success (RLinf's
  `apply_gt_success_bonus`: every history step, scored or not; only scored items in the other modes).
- `reward`: `env_reward_weight * env_reward + reward_weight * model_output` (RLinf's env worker,
  `compute_bootstrap_rewards`).

Reward modes decide which items the model scores (RLinf's `reward.reward_mode`):
- `per_step`: every item.
- `terminal`: only items whose `done` flag is set; every other item's model_output is 0.0.
- `history_buffer`: RLinf's `HistoryManager` counting, per stream (one per item index of a parallel-env
  batch): the step count since the last done grows by one per step; RLinf trims its buffer to
  `history_size` after every step, so at most `history_size + 1` entries are held when a window is
  built. A window is scored when at least `min_history_size` entries are held and
  `count % input_interval == 0` (an unset interval, 0 here, means `history_size`): it covers the last
  `history_size` entries. Otherwise, on a done step with `input_on_done`, the window covers the
  `count % input_interval` entries since the last scored window, unless that is shorter than
  `min_history_size` (such a step gets `interval_reward`, as RLinf's steps without a window do: a video model
  cannot take one frame). A done step clears the stream.
  With `history_reward_assign` (RLinf's env worker, `assign_history_reward`) the window's
  `reward_weight * model_output` is also added to the window's earlier steps: the item says how many
  (`assign_previous`) and how much (`assign_reward`), since those rewards were already returned.
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
THRESHOLDED = "thresholded"
REWARD_TYPES = (BINARY, SOFT, THRESHOLDED)
MAX_HISTORY = 256
# What an out-of-distribution item (a ResNet model's `ood` flag, training.resnet.ood) receives: `flag` leaves its
# reward alone and only says `ood: true`; `fail_reward` / `interval_reward` pay that setting instead of the
# model output (and the item is no success). The service alone does this; RLinf's local path has no flag.
OOD_FLAG = "flag"
OOD_FAIL_REWARD = "fail_reward"
OOD_INTERVAL_REWARD = "interval_reward"
OOD_ACTIONS = (OOD_FLAG, OOD_FAIL_REWARD, OOD_INTERVAL_REWARD)


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
    input_interval: int = 1  # 0: unset, i.e. history_size (RLinf)
    interval_reward: float = 0.0
    input_on_done: bool = False
    history_reward_assign: bool = False
    gt_success_bonus: float = 0.0
    ood_action: str = OOD_FLAG

    def __post_init__(self) -> None:
        if self.ood_action not in OOD_ACTIONS:
            raise RewardSettingsError(f"ood_action must be one of {', '.join(OOD_ACTIONS)}, got {self.ood_action!r}")
        if self.reward_mode not in REWARD_MODES:
            raise RewardSettingsError(f"reward_mode must be one of {', '.join(REWARD_MODES)}, got {self.reward_mode!r}")
        if self.reward_type not in REWARD_TYPES:
            raise RewardSettingsError(f"reward_type must be one of {', '.join(REWARD_TYPES)}, got {self.reward_type!r}")
        for name in (
            "threshold",
            "success_reward",
            "fail_reward",
            "env_reward_weight",
            "reward_weight",
            "interval_reward",
            "gt_success_bonus",
        ):
            if not math.isfinite(float(getattr(self, name))):
                raise RewardSettingsError(f"{name} must be a finite number")
        if not 0.0 <= self.threshold <= 1.0:
            raise RewardSettingsError(f"threshold must be between 0 and 1, got {self.threshold}")
        if not 1 <= self.history_size <= MAX_HISTORY:
            raise RewardSettingsError(f"history_size must be between 1 and {MAX_HISTORY}")
        if self.min_history_size < 0 or self.input_interval < 0:
            raise RewardSettingsError("min_history_size and input_interval must be >= 0 (input_interval 0: unset)")
        if self.input_interval > 100_000:
            raise RewardSettingsError("input_interval must be at most 100000")
        if self.min_history_size > self.history_size:
            raise RewardSettingsError("min_history_size cannot exceed history_size")

    @property
    def interval(self) -> int:
        """The input interval in effect: an unset (0) interval is `history_size` (RLinf's HistoryManager)."""
        return self.input_interval or max(self.history_size, 1)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ tripled compute_rewards' cost per item
class ItemReward:
    probability: float | None
    success: bool | None
    reward: float
    scored: bool
    model_output: float = 0.0
    window: int = 0  # history_buffer: steps in the scored window (0: not scored)
    assign_previous: int = 0  # history_reward_assign: earlier steps that also get assign_reward
    assign_reward: float = 0.0
    ood: bool | None = None  # out of distribution (None: the model carries no OOD statistics, or not scored)
    ood_score: float | None = None  # the model's OOD score over its threshold (flagged above 1)


def model_output(probability: float, settings: RewardSettings) -> float:
    """What the model contributes for a scored item (before the success bonus)."""
    p = float(probability)
    if settings.reward_type == SOFT:
        return p
    if settings.reward_type == THRESHOLDED:  # RLinf: torch.where(rewards > thr, rewards, 0)
        return p if p > settings.threshold else 0.0
    return settings.success_reward if p > settings.threshold else settings.fail_reward


def combine(env_reward: float, output: float, settings: RewardSettings) -> float:
    return settings.env_reward_weight * float(env_reward) + settings.reward_weight * float(output)


def history_window(count: int, done: bool, settings: RewardSettings) -> int:
    """Entries in the window RLinf's HistoryManager builds at a step whose count (since the last done,
    this step included) is `count`; 0 when nothing is scored."""
    held = min(count, settings.history_size + 1)  # trimmed to history_size after every build
    interval = settings.interval
    if held < settings.min_history_size:
        return 0
    if count % interval == 0:
        return min(held, settings.history_size)
    if done and settings.input_on_done:
        window = min(held, count % interval)
        # never shorter than the model takes (a video model needs 2 frames): interval_reward instead
        return window if window >= settings.min_history_size else 0
    return 0


def history_step(count: int, settings: RewardSettings, done: bool = False) -> tuple[int, int]:
    """(window size, 0 = not scored; count after this step) for a stream that had counted `count` steps."""
    count += 1
    window = history_window(count, done, settings)
    return window, (0 if done else count)


def plan_scoring(
    settings: RewardSettings, n: int, dones: Sequence[bool] | None = None, history: Sequence[int] | None = None
) -> tuple[list[int], list[int] | None]:
    """Which of `n` items the model must score, as window sizes (0 = not scored; 1 outside history_buffer),
    and the streams' new step counts (history_buffer only; `history` holds the counts before this step)."""
    dones = [bool(d) for d in dones] if dones is not None else [False] * n
    if settings.reward_mode == PER_STEP:
        return [1] * n, None
    if settings.reward_mode == TERMINAL:
        return [1 if d else 0 for d in dones], None
    counts = list(history) if history is not None else [0] * n
    windows, after = [], []
    for count, done in zip(counts, dones, strict=True):
        window, count = history_step(count, settings, done)
        windows.append(window)
        after.append(count)
    return windows, after


def compute_rewards(
    settings: RewardSettings,
    probabilities: Sequence[float | None],
    *,
    scored: Sequence[int | bool] | None = None,
    env_rewards: Sequence[float] | None = None,
    env_success: Sequence[bool] | None = None,
    outputs: Sequence[float | None] | None = None,
    ood: Sequence[tuple[bool, float] | None] | None = None,
) -> list[ItemReward]:
    """One ItemReward per item. `scored[i]` is the window size (or True/False); `probabilities[i]` may be
    None where it is 0. `outputs[i]`, when given, is the scored item's model output before the success
    bonus (a VLM's label reward) instead of one derived from the probability. `ood[i]`, when given, is a
    scored item's (flagged, score); a flagged item's output follows `settings.ood_action`."""
    n = len(probabilities)
    scored = list(scored) if scored is not None else [1] * n
    env_rewards = list(env_rewards) if env_rewards is not None else [0.0] * n
    env_success = [bool(s) for s in env_success] if env_success is not None else [False] * n
    outputs = list(outputs) if outputs is not None else [None] * n
    ood = list(ood) if ood is not None else [None] * n
    if not len(scored) == len(env_rewards) == len(env_success) == len(outputs) == len(ood) == n:
        raise ValueError("probabilities, scored, env_rewards and env_success must have the same length")
    history = settings.reward_mode == HISTORY_BUFFER
    items = []
    for probability, window, env_reward, success, given, off in zip(
        probabilities, scored, env_rewards, env_success, outputs, ood, strict=True
    ):
        window = int(window)
        bonus = settings.gt_success_bonus if success else 0.0
        if window:
            p = None if probability is None else float(probability)
            if given is not None:
                output = float(given) + bonus
            elif p is not None:
                output = model_output(p, settings) + bonus
            else:
                raise ValueError("a scored item needs a probability")
            verdict = None if p is None else p > settings.threshold
            flagged = off is not None and off[0]
            if flagged and settings.ood_action != OOD_FLAG:
                paid = settings.fail_reward if settings.ood_action == OOD_FAIL_REWARD else settings.interval_reward
                output, verdict = paid + bonus, False
            assign = window - 1 if history and settings.history_reward_assign else 0
            items.append(
                ItemReward(
                    probability=p,
                    success=verdict,
                    reward=combine(env_reward, output, settings),
                    scored=True,
                    model_output=output,
                    window=window if history else 0,
                    assign_previous=assign,
                    assign_reward=settings.reward_weight * output if assign else 0.0,
                    ood=None if off is None else bool(off[0]),
                    ood_score=None if off is None else float(off[1]),
                )
            )
        else:
            output = settings.interval_reward + bonus if history else 0.0
            items.append(ItemReward(None, None, combine(env_reward, output, settings), False, model_output=output))
    return items


def assign_history_rewards(rewards: list[float], item: ItemReward) -> list[float]:
    """RLinf's `history_reward_assign` applied to one stream's rewards so far (this step's included, last):
    the earlier steps of the scored window also receive `reward_weight * model_output`. Returns the list."""
    for back in range(2, min(item.assign_previous + 1, len(rewards)) + 1):
        rewards[-back] += item.assign_reward
    return rewards


def result_parts(result: object) -> tuple[float, tuple[bool, float] | None]:
    """A ResNet worker result as (probability, (ood flag, ood score) or None): a bare number from a model
    without OOD statistics, else `{"probability", "ood", "ood_score"}` (training.resnet.scorer)."""
    if isinstance(result, dict):
        return float(result["probability"]), (bool(result["ood"]), float(result["ood_score"]))
    return float(result), None  # type: ignore[arg-type]
