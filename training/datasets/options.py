"""Options of a dataset snapshot (validated; stored on the snapshot row as JSON)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .rlinf_binary import BinaryOptions

KNOWN_SOURCES = ("human", "proposal", "model")
# auto: by episode when that gives both classes in train and val, else by frame (one episode, or only
# imported success/ + failure/ folders); episode: RLinf's simulation rule; frame: its real-world rule.
SPLIT_MODES = ("auto", "episode", "frame")


class OptionsError(ValueError):
    pass


@dataclass
class SnapshotOptions:
    sources: list[str] = field(default_factory=lambda: ["human"])
    camera: str = ""  # empty: the project's first camera
    num_samples_per_episode: int = 0
    keep_last_frame: bool = True
    val_split: float = 0.2
    fail_success_ratio: float = 2.0
    seed: int = 42
    split: str = "auto"
    trend: bool = True
    trend_val_split: float = 0.1
    # RLinf's preprocessing defaults (preprocess_vlm_trend_reward_dataset.py: --balance-labels and
    # --reverse-positive-as-negative are on unless turned off)
    trend_balance: bool = True
    trend_reverse_augmentation: bool = True
    png_folders: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.sources, list) or not self.sources:
            raise OptionsError("sources must list at least one of: " + ", ".join(KNOWN_SOURCES))
        unknown = [s for s in self.sources if s not in KNOWN_SOURCES]
        if unknown:
            raise OptionsError(f"unknown label source(s) {unknown}; use {', '.join(KNOWN_SOURCES)}")
        if isinstance(self.num_samples_per_episode, bool) or not isinstance(self.num_samples_per_episode, int):
            raise OptionsError("num_samples_per_episode must be an integer")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise OptionsError("seed must be a non-negative integer")
        for name in ("val_split", "fail_success_ratio", "trend_val_split"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise OptionsError(f"{name} must be a number")
            setattr(self, name, float(value))
        if self.split not in SPLIT_MODES:
            raise OptionsError(f"split must be one of {', '.join(SPLIT_MODES)}, got {self.split!r}")
        if not 0.0 <= self.trend_val_split < 1.0:
            raise OptionsError("trend_val_split must be in [0, 1)")
        try:
            self.binary()
        except ValueError as exc:
            raise OptionsError(str(exc)) from None

    def binary(self) -> BinaryOptions:
        return BinaryOptions(
            num_samples_per_episode=self.num_samples_per_episode,
            keep_last_frame=self.keep_last_frame,
            val_split=self.val_split,
            fail_success_ratio=self.fail_success_ratio,
            seed=self.seed,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SnapshotOptions:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise OptionsError(f"unknown snapshot option(s): {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise OptionsError(str(exc)) from None
