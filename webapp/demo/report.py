"""The demo model's figures: the deployment threshold picked from validation, and the live check (does the
probability cross the threshold only once the cube is lifted?), as lines the command prints. No Django."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


def accuracy_at(probs: ArrayLike, labels: ArrayLike, threshold: float) -> float:
    """Share of frames where `p > threshold` (how the reward server decides success) matches the label."""
    p, y = np.asarray(probs, dtype=np.float64), np.asarray(labels).astype(bool)
    return float(np.mean((p > threshold) == y)) if len(p) else 0.0


def pick_threshold(probs: ArrayLike, labels: ArrayLike, *, low: float = 0.3, high: float = 0.95) -> float:
    """The threshold in [low, high] (steps of 0.05) with the best balanced validation accuracy; on a tie the
    highest one, since crossing early (a reward before the cube is lifted) is the costlier mistake."""
    p, y = np.asarray(probs, dtype=np.float64), np.asarray(labels).astype(bool)
    if not len(p) or y.all() or not y.any():
        return 0.5
    best, best_score = 0.5, -1.0
    for t in np.round(np.arange(low, high + 1e-9, 0.05), 2):
        score = (np.mean(p[y] > t) + np.mean(p[~y] <= t)) / 2
        if score >= best_score - 1e-12:
            best, best_score = float(t), float(score)
    return best


@dataclass(frozen=True)
class SeedCheck:
    seed: int
    lift_step: int | None  # first step the env state shows the cube lifted
    first_crossing: int | None  # first step with probability > threshold
    steps: int

    @property
    def verdict(self) -> str:
        if self.lift_step is None:
            return "not lifted" if self.first_crossing is None else "early (never lifted)"
        if self.first_crossing is None:
            return "missed"
        return "ok" if self.first_crossing >= self.lift_step else "early"

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


def seed_check(seed: int, probs: ArrayLike, threshold: float, lift: int | None) -> SeedCheck:
    above = np.flatnonzero(np.asarray(probs, dtype=np.float64) > threshold)
    crossing = int(above[0]) if len(above) else None
    return SeedCheck(seed=seed, lift_step=lift, first_crossing=crossing, steps=int(np.size(probs)))


def live_lines(checks: Sequence[SeedCheck], threshold: float) -> list[str]:
    """One line per seed, then the count: '9/10 seeds cross only after the lift'."""
    lines = [
        f"  seed {c.seed}: lift at step {c.lift_step}, first crossing of {threshold:.2f} at step "
        f"{c.first_crossing} of {c.steps} ({c.verdict}"
        + (
            f", {c.first_crossing - c.lift_step:+d} steps"
            if c.lift_step is not None and c.first_crossing is not None
            else ""
        )
        + ")"
        for c in checks
    ]
    good = sum(c.ok for c in checks)
    lines.append(f"live check: {good}/{len(checks)} seeds cross the threshold only after the lift (goal: 9/10)")
    return lines
