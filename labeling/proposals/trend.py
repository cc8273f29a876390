"""The trend rule that proposes window labels (RLinf's "VLM Trend"; formats.md section 4). No Django.

Windows of `window_size` consecutive steps start every `stride` steps. Each window's delta is
`score[end] - score[start]`; `|delta| <= delta_threshold` is unclear, a larger rise positive, a larger
fall negative. Windows whose position is in the last `tail_unclear_ratio` of the episode's windows are
forced to unclear (RLinf: `tail_start = int(n_windows * (1 - ratio))`). A window with a step that lacks
a camera view is skipped, but still counts for the tail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

POSITIVE = "positive"
NEGATIVE = "negative"
UNCLEAR = "unclear"


@dataclass(frozen=True)
class TrendParams:
    window_size: int = 5
    stride: int = 1
    delta_threshold: float = 0.05
    tail_unclear_ratio: float = 0.15

    def __post_init__(self) -> None:
        if self.window_size < 1:
            raise ValueError("window_size must be at least 1")
        if self.stride < 1:
            raise ValueError("stride must be at least 1")
        if self.delta_threshold < 0:
            raise ValueError("delta_threshold must not be negative")
        if not 0.0 <= self.tail_unclear_ratio <= 1.0:
            raise ValueError("tail_unclear_ratio must be between 0 and 1")

    def as_dict(self) -> dict:
        return {
            "window_size": self.window_size,
            "stride": self.stride,
            "delta_threshold": self.delta_threshold,
            "tail_unclear_ratio": self.tail_unclear_ratio,
        }


@dataclass(frozen=True)
class TrendWindow:
    start: int  # step index of the first step
    end: int  # step index of the last step (inclusive)
    label: str
    delta: float
    start_score: float
    end_score: float
    tail: bool  # forced to unclear because it lies in the episode's tail


def trend_label(delta: float, delta_threshold: float) -> str:
    if abs(delta) <= delta_threshold:
        return UNCLEAR
    return POSITIVE if delta > 0 else NEGATIVE


def trend_windows(
    scores: Sequence[float],
    params: TrendParams,
    *,
    indices: Sequence[int] | None = None,
    complete: Sequence[bool] | None = None,
) -> list[TrendWindow]:
    """Proposed windows for one episode.

    `scores[i]` is the score of the i-th step in order; `indices[i]` its step index (default i);
    `complete[i]` whether that step has every camera view (default all True).
    """
    n = len(scores)
    indices = list(range(n)) if indices is None else list(indices)
    if len(indices) != n or (complete is not None and len(complete) != n):
        raise ValueError("scores, indices and complete must have the same length")
    if n < params.window_size:
        return []
    starts = list(range(0, n - params.window_size + 1, params.stride))
    tail_start = int(len(starts) * (1.0 - float(params.tail_unclear_ratio)))
    windows = []
    for position, first in enumerate(starts):
        last = first + params.window_size - 1
        if complete is not None and not all(complete[first : last + 1]):
            continue
        start_score, end_score = float(scores[first]), float(scores[last])
        delta = end_score - start_score
        tail = position >= tail_start
        label = UNCLEAR if tail else trend_label(delta, params.delta_threshold)
        windows.append(TrendWindow(indices[first], indices[last], label, delta, start_score, end_score, tail))
    return windows
