"""Observations as RL envs give them, turned into the RGB frames a deployment scores (numpy only).

A deployment scores uint8 [B,H,W,3] images. DI-engine's envs give RGB frames (channels last or first),
grayscale frames and Atari-style frame stacks ([4,84,84] float32 in [0, 1] from its `FrameStackWrapper`),
or vectors (CartPole's [4] floats). `FrameLayout` is decided once, from the first observation's shape (or
the configured `obs_format`), and renders every later batch the same way:

- `rgb`: [H,W,3] or [3,H,W], as it is;
- `gray`: [H,W], [1,H,W] or [H,W,1], replicated to 3 channels;
- `gray_stack`: K grayscale frames [K,H,W] (DI-engine's layout) or [H,W,K]: frame `stack_index` (default -1,
  the newest, as DI-engine's and Gym's frame stacks put it last) replicated to 3 channels;
- `rgb_stack`: K RGB frames [K,H,W,3], [K,3,H,W] or along the channels [3K,H,W] / [H,W,3K]: frame
  `stack_index` of them.

`auto` (the default) reads the shape: one dimension of 3 is RGB, of 1 (or two dimensions) grayscale; a
small first or last dimension (at most 16, smaller than both others) is a stack of that many grayscale
frames, unless it is a multiple of 3 (6, 9, 12: grayscale or RGB frames?), which is refused asking for
`obs_format`. A vector (one dimension) is refused: a deployment scores camera frames, not states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

OBS_FORMATS = ("auto", "rgb", "gray", "gray_stack", "rgb_stack")
MAX_STACK = 16  # more channels than this, on a small axis, is not read as a frame stack


class ObservationError(ValueError):
    """An observation the deployment cannot score as it is; the message names its shape and what to set."""


@dataclass(frozen=True)
class FrameLayout:
    shape: tuple[int, ...]  # one observation's shape (no batch axis)
    kind: str  # rgb | gray | gray_stack | rgb_stack
    channels_first: bool  # channels (or the stack) on the first axis
    stack_index: int = -1

    def describe(self) -> str:
        if self.kind in ("rgb", "gray"):
            return f"{self.kind} {list(self.shape)}"
        return f"{self.kind} {list(self.shape)}, frame {self.stack_index} of the stack"

    def render(self, batch: Any) -> np.ndarray:
        """[B,H,W,3] (the input's dtype) from a batch of observations of this layout's shape."""
        array = np.asarray(batch)
        if tuple(array.shape[1:]) != self.shape:
            raise ObservationError(
                f"an observation of shape {list(array.shape[1:])} after ones of shape {list(self.shape)}: "
                "every observation must have the shape of the first"
            )
        if array.ndim == 5:  # [B,K,H,W,3] or [B,K,3,H,W]: one of the K frames
            frame = array[:, self.stack_index]
            return frame.transpose(0, 2, 3, 1) if self.channels_first else frame
        if array.ndim == 3:  # [B,H,W] grayscale
            return np.repeat(array[..., None], 3, axis=-1)
        if self.channels_first:
            array = array.transpose(0, 2, 3, 1)
        channels = array.shape[-1]
        if self.kind == "rgb":
            return array
        if self.kind in ("gray", "gray_stack"):
            return np.repeat(array[..., self.stack_index % channels, None], 3, axis=-1)
        start = (self.stack_index % (channels // 3)) * 3  # rgb_stack along the channels
        return array[..., start : start + 3]


def layout_for(shape: Any, obs_format: str = "auto", stack_index: int = -1) -> FrameLayout:
    """How to render observations of `shape` (one observation, no batch axis); ObservationError naming the
    shape and what to configure when they cannot be scored as images."""
    shape = tuple(int(v) for v in shape)
    if obs_format not in OBS_FORMATS:
        raise ObservationError(f"obs_format must be one of {', '.join(OBS_FORMATS)}, got {obs_format!r}")
    if len(shape) <= 1:
        raise ObservationError(
            f"the observation has shape {list(shape)}: a vector (like CartPole's state), not an image. A Reward "
            "Studio deployment scores camera frames: give the env image observations (an image env, or a wrapper "
            "that renders frames into the observation or a dict key named by image_key) and point obs_key / "
            "image_key at them"
        )
    if len(shape) > 4:
        raise ObservationError(f"an observation of shape {list(shape)} has too many axes for a frame or a stack")
    layout = _read(shape, obs_format, stack_index)
    if layout is None:
        hint = "obs_format to rgb, gray, gray_stack or rgb_stack" if obs_format == "auto" else "another obs_format"
        why = _ambiguous(shape) if obs_format == "auto" else f"it is not a {obs_format} layout"
        raise ObservationError(f"cannot render an observation of shape {list(shape)} as an image ({why}): set {hint}")
    count = _frames_in(layout)
    if not -count <= stack_index < count:
        raise ObservationError(f"stack_index {stack_index} is outside the {count} frames of shape {list(shape)}")
    return layout


def _read(shape: tuple[int, ...], fmt: str, index: int) -> FrameLayout | None:
    auto = fmt == "auto"
    if len(shape) == 2:
        return FrameLayout(shape, "gray", False, index) if fmt in ("auto", "gray") else None
    if len(shape) == 4:  # [K,H,W,3] or [K,3,H,W]
        if fmt not in ("auto", "rgb_stack"):
            return None
        if shape[-1] == 3:
            return FrameLayout(shape, "rgb_stack", False, index)
        return FrameLayout(shape, "rgb_stack", True, index) if shape[1] == 3 else None
    first, last = shape[0], shape[-1]
    for channels, channels_first in ((last, False), (first, True)):
        if channels == 3 and fmt in ("auto", "rgb"):
            return FrameLayout(shape, "rgb", channels_first, index)
        if channels == 1 and fmt in ("auto", "gray"):
            return FrameLayout(shape, "gray", channels_first, index)
    for channels, channels_first in ((first, True), (last, False)):  # DI-engine's stacks are channels first
        others = shape[1:] if channels_first else shape[:-1]
        if not channels < min(others):
            continue
        if fmt == "gray_stack" or (auto and 1 < channels <= MAX_STACK and channels % 3):
            return FrameLayout(shape, "gray_stack", channels_first, index)
        if fmt == "rgb_stack" and channels % 3 == 0:
            return FrameLayout(shape, "rgb_stack", channels_first, index)
    return None


def _ambiguous(shape: tuple[int, ...]) -> str:
    small = min(shape[0], shape[-1])
    if small % 3 == 0 and small <= MAX_STACK:
        return f"{small} channels: {small} grayscale frames (gray_stack) or {small // 3} RGB frames (rgb_stack)?"
    return "no axis reads as 1 or 3 channels or a frame stack"


def _frames_in(layout: FrameLayout) -> int:
    if layout.kind in ("rgb", "gray"):
        return 1
    if len(layout.shape) == 4:
        return layout.shape[0]
    channels = layout.shape[0] if layout.channels_first else layout.shape[-1]
    return channels if layout.kind == "gray_stack" else channels // 3
