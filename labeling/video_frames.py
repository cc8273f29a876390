"""Video files as frames and back, with PyAV (FFmpeg): bounded decoding of mp4 (or any container FFmpeg
reads) into uint8 RGB arrays, and encoding of RGB frames into an mp4 that LeRobot's loader reads.

Decoding is bounded before any pixel is decoded: the stream's width and height are checked against the
image limits, and decoding stops with an error past `max_frames` frames. No Django imports.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

VIDEO_SUFFIXES = {".mp4", ".mkv", ".webm", ".mov"}


class VideoError(ValueError):
    """A video that cannot be read or is over a limit; the message says which."""


@dataclass(frozen=True)
class VideoLimits:
    max_frames: int
    max_side: int
    max_pixels: int


@dataclass(frozen=True)
class VideoInfo:
    width: int
    height: int
    fps: float
    codec: str


def decode_frames(
    path: Path, limits: VideoLimits, *, start_s: float | None = None, end_s: float | None = None
) -> Iterator[np.ndarray]:
    """RGB uint8 [H, W, 3] frames of the first video stream, in presentation order, one at a time (the caller
    keeps what it needs: a long video is never held decoded whole).

    With `start_s`/`end_s`, only frames whose timestamp t satisfies start_s - 1/(2 fps) <= t < end_s - 1/(2 fps)
    (LeRobot v3.0 keeps many episodes in one file, each a time range). Raises VideoError on a file FFmpeg
    cannot read, a frame size over the limits, or more than `limits.max_frames` frames."""
    import av

    count = 0
    try:
        with av.open(str(path)) as container:
            info = _stream_info(container, path)
            _check_size(info, limits, path)
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            half = 0.5 / info.fps if info.fps > 0 else 0.0
            if start_s is not None and start_s > 0:
                time_base = stream.time_base or Fraction(1, 1_000_000)
                container.seek(int(max(start_s - 1.0, 0.0) / time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                t = float(frame.time) if frame.time is not None else count / max(info.fps, 1e-9)
                if start_s is not None and t < start_s - half:
                    continue
                if end_s is not None and t >= end_s - half:
                    break
                if count >= limits.max_frames:
                    raise VideoError(f"{path.name}: more than {limits.max_frames} frames (VIDEO_MAX_FRAMES)")
                count += 1
                yield frame.to_ndarray(format="rgb24")
    except av.FFmpegError as exc:
        raise VideoError(f"{path.name}: not a readable video ({exc})") from None


def encode_frames(path: Path, frames: Iterable[np.ndarray], *, fps: int, codec: str = "libx264") -> int:
    """Write RGB uint8 frames (all one even size) as an H.264 yuv420p mp4, one frame per 1/fps s; the count."""
    import av

    count = 0
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=Fraction(fps))
        assert isinstance(stream, av.VideoStream)
        stream.pix_fmt = "yuv420p"
        stream.options = {"g": "2", "crf": "18"}  # a key frame every 2 frames: cheap seeks, as LeRobot encodes
        for array in frames:
            if count == 0:
                stream.height, stream.width = array.shape[:2]
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(array), format="rgb24")
            frame.pts = count
            frame.time_base = Fraction(1, fps)
            container.mux(stream.encode(frame))
            count += 1
        container.mux(stream.encode())
    return count


def video_camera(path: Path) -> str | None:
    """`ep1.wrist.mp4` -> `wrist`; `ep1.mp4` -> None."""
    stem = path.name[: -len(path.suffix)]
    return stem.rsplit(".", 1)[1] if "." in stem else None


def video_episode_name(path: Path) -> str:
    """`ep1.wrist.mp4` and `ep1.mp4` -> `ep1`: files of one episode share it."""
    return path.name.split(".", 1)[0]


def _stream_info(container, path: Path) -> VideoInfo:
    if not container.streams.video:
        raise VideoError(f"{path.name}: holds no video stream")
    stream = container.streams.video[0]
    rate = stream.average_rate or stream.guessed_rate or 0
    return VideoInfo(int(stream.width), int(stream.height), float(rate), stream.codec_context.name)


def _check_size(info: VideoInfo, limits: VideoLimits, path: Path) -> None:
    if info.width <= 0 or info.height <= 0:
        raise VideoError(f"{path.name}: the video has no frame size")
    if max(info.width, info.height) > limits.max_side or info.width * info.height > limits.max_pixels:
        raise VideoError(
            f"{path.name}: frames of {info.width}x{info.height} are over the limits "
            f"(MAX_IMAGE_SIDE {limits.max_side}, MAX_IMAGE_PIXELS {limits.max_pixels})"
        )
