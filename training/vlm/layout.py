"""How a trend window is laid out for the processor: RLinf's two videos, or ten separate images.

`video` (the default, RLinf's format): the main view's frames as one video and the extra view's as a
second, through the processor's video path, after the prompt's two video placeholders. This is what
RLinf's SFT dataset (`rlinf/data/datasets/vlm/vlm_trend_reward.py`, `VLMTrendRewardSFTDataset
.process_inputs`) trains on and what its local reward worker (`VLMTrendRewardInputBuilder`) scores with:
user content `"<video>\n<video>\n\n<prompt>"`, `video_metadata` of `total_num_frames = len(video)` at
24 fps for each video.
`images`: every frame a separate image part (main frames, then extra frames), then the prompt: the order
RLinf's API reward worker posts them in; Reward Studio's layout before RLinf's was matched.

A window always travels as one flat list of images (main frames then extra frames, equal counts): a
`video` model splits it in half into its two videos, so a chat request that posts the ten frames as image
parts is scored exactly as the same window posted as two videos.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

VIDEO, IMAGES = "video", "images"
LAYOUTS = (VIDEO, IMAGES)
DEFAULT_LAYOUT = VIDEO
# RLinf's SFT and local worker give every video this frame rate in `video_metadata`.
VIDEO_FPS = 24.0


def layout_check(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"input_layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    return layout


def layout_of(meta: dict | None, fallback: str = DEFAULT_LAYOUT) -> str:
    """The layout a checkpoint's `vlm.json` (or a model's config) records.

    A trained checkpoint written before layouts existed (a `vlm.json` with a `config` but no
    `input_layout`) was trained on separate images; anything else without the key gets `fallback`.
    """
    meta = meta or {}
    layout = meta.get("input_layout") or (meta.get("config") or {}).get("input_layout")
    if layout:
        return layout_check(str(layout))
    if "config" in meta and "step" in meta:
        return IMAGES
    return layout_check(fallback)


def window_videos(images: Sequence[np.ndarray]) -> list[list[np.ndarray]]:
    """[main frames, extra frames]: a flat window (main frames then extra frames) split in half."""
    n = len(images)
    if n < 2 or n % 2:
        raise ValueError(
            f"a window for a video-layout model needs the same number of frames from both views "
            f"(main frames then extra frames), got {n} images"
        )
    half = n // 2
    return [list(images[:half]), list(images[half:])]


def video_user_content(processor, prompt: str) -> str:
    """RLinf's user turn for two videos: both placeholders on their own lines, a blank line, the prompt."""
    token = getattr(processor, "video_token", None) or "<|video_pad|>"
    return f"{token}\n{token}\n\n{prompt}"


def video_metadata(videos: Sequence[Sequence[np.ndarray]]) -> list[dict]:
    return [{"total_num_frames": len(video), "fps": VIDEO_FPS} for video in videos]
