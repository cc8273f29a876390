"""The binary step-chunk format of the ingest API: one body per chunk, no multipart, no base64.

Plain Python (no Django, no numpy): the agent's uploader encodes with it and the server decodes with it.

    4 bytes   magic b"RSC" + format version (1)
    4 bytes   header length N, unsigned big-endian
    N bytes   header, UTF-8 JSON: {"steps": [{"index": 0, "action": [...], "reward": 0.0, ...,
                                              "images": {"main": 20311, "extra": 19876}}, ...]}
    ...       the image files (PNG, JPEG or uint8 .npy bytes) back to back, in header order: step by step,
              and within a step in the order of its "images" object, whose values are the byte lengths

The step fields are those of the JSON/multipart chunk (index, action, reward, terminated, truncated,
success, score, info). `decode_chunk` checks the layout, the field types and every size limit before
any image is touched, and slices the images out as zero-copy views of the body.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from typing import NoReturn

CONTENT_TYPE = "application/x-rs-steps"
VERSION = 1
MAGIC = b"RSC" + bytes([VERSION])
PREFIX = struct.Struct(">4sI")
MAX_STEP_INDEX = 2**31 - 1
MAX_ACTION_SIZE = 1024
MAX_CAMERA_NAME = 100


class ChunkError(ValueError):
    """A body that does not follow the format; the message says what is wrong (a 400)."""


class ChunkTooLarge(ChunkError):
    """A body over one of the size limits (a 413); the message names the limit."""


@dataclass(frozen=True)
class ChunkLimits:
    max_header_bytes: int
    max_steps: int
    max_images: int


@dataclass
class ChunkStep:
    index: int
    action: list[float] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    success: bool = False
    score: float | None = None
    info: dict = field(default_factory=dict)
    images: dict[str, memoryview] = field(default_factory=dict)


def encode_chunk(steps: list[dict], images: list[dict[str, bytes]]) -> bytes:
    """One chunk's body. `steps`: the step fields (without images); `images[i]`: camera -> encoded bytes of
    steps[i] (PNG is what the server stores fastest: it is checked, never decoded)."""
    if len(steps) != len(images):
        raise ValueError("one images dict per step")
    header_steps = [
        {**step, "images": {camera: len(data) for camera, data in per_step.items()}}
        for step, per_step in zip(steps, images, strict=True)
    ]
    header = json.dumps({"steps": header_steps}, separators=(",", ":"), allow_nan=False).encode()
    return b"".join([PREFIX.pack(MAGIC, len(header)), header, *(d for per in images for d in per.values())])


def decode_chunk(body: bytes, limits: ChunkLimits) -> list[ChunkStep]:
    """The steps of a chunk body, each with its images as views of `body`. Raises ChunkError/ChunkTooLarge."""
    if len(body) < PREFIX.size:
        raise ChunkError(f"body of {len(body)} bytes is shorter than the {PREFIX.size}-byte chunk prefix")
    magic, header_size = PREFIX.unpack_from(body)
    if magic[:3] != MAGIC[:3]:
        raise ChunkError(f"not a step chunk: the body must start with {MAGIC[:3]!r} and the format version")
    if magic[3] != VERSION:
        raise ChunkError(f"chunk format version {magic[3]} is not supported; this server reads version {VERSION}")
    if header_size > limits.max_header_bytes:
        raise ChunkTooLarge(f"chunk header of {header_size} bytes; the limit is {limits.max_header_bytes} bytes")
    end = PREFIX.size + header_size
    if end > len(body):
        raise ChunkError(f"chunk header says {header_size} bytes but the body ends after {len(body) - PREFIX.size}")
    try:
        header = json.loads(bytes(body[PREFIX.size : end]), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise ChunkError(f"chunk header is not valid UTF-8 JSON: {exc}") from None
    raw_steps = header.get("steps") if isinstance(header, dict) else None
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ChunkError('chunk header must be an object with a non-empty "steps" list')
    if len(raw_steps) > limits.max_steps:
        raise ChunkTooLarge(f"{len(raw_steps)} steps in one chunk; the limit is {limits.max_steps}")
    parsed = [_step(raw, position) for position, raw in enumerate(raw_steps)]
    steps = [step for step, _ in parsed]
    lengths = [(step, camera, size) for step, sizes in parsed for camera, size in sizes]
    if len(lengths) > limits.max_images:
        raise ChunkTooLarge(f"{len(lengths)} images in one chunk; the limit is {limits.max_images}")
    expected = end + sum(size for _, _, size in lengths)
    if expected != len(body):
        raise ChunkError(f"the header's image sizes add up to a body of {expected} bytes; it has {len(body)}")
    view, offset = memoryview(body), end
    for step, camera, size in lengths:
        step.images[camera] = view[offset : offset + size]
        offset += size
    return steps


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _step(raw: object, position: int) -> tuple[ChunkStep, list[tuple[str, int]]]:
    if not isinstance(raw, dict):
        raise ChunkError(f"steps[{position}] must be an object")
    index = raw.get("index")
    label = f"step {index}" if isinstance(index, int) else f"steps[{position}]"
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= MAX_STEP_INDEX:
        raise ChunkError(f"{label}: index must be an integer from 0 to {MAX_STEP_INDEX}")
    unknown = set(raw) - {"index", "action", "reward", "terminated", "truncated", "success", "score", "info", "images"}
    if unknown:
        raise ChunkError(f"{label}: unknown field {sorted(unknown)[0]!r}")
    action = raw.get("action", [])
    if not isinstance(action, list) or len(action) > MAX_ACTION_SIZE:
        raise ChunkError(f"{label}: action must be a list of at most {MAX_ACTION_SIZE} numbers")
    step = ChunkStep(
        index=index,
        action=_numbers(action, label, "action"),
        reward=_number(raw.get("reward", 0.0), label, "reward"),
        terminated=_flag(raw.get("terminated", False), label, "terminated"),
        truncated=_flag(raw.get("truncated", False), label, "truncated"),
        success=_flag(raw.get("success", False), label, "success"),
        score=None if raw.get("score") is None else _number(raw["score"], label, "score"),
        info=raw.get("info", {}),
    )
    if not isinstance(step.info, dict):
        raise ChunkError(f"{label}: info must be an object")
    images = raw.get("images", {})
    if not isinstance(images, dict):
        raise ChunkError(f"{label}: images must map camera names to byte lengths")
    sizes = []
    for camera, size in images.items():
        if not camera or len(camera) > MAX_CAMERA_NAME:
            raise ChunkError(f"{label}: camera names are 1 to {MAX_CAMERA_NAME} characters")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ChunkError(f"{label}: images.{camera}: the byte length must be a positive integer")
        sizes.append((camera, size))
    return step, sizes


def _number(value: object, label: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ChunkError(f"{label}: {name} must be a finite number")
    try:
        if math.isfinite(value):
            return float(value)
    except OverflowError:  # an integer too large for a float
        pass
    raise ChunkError(f"{label}: {name} must be a finite number")


def _numbers(values: list, label: str, name: str) -> list[float]:
    """`_number` for each value; a list of plain finite numbers (the usual case) is checked in C loops."""
    if set(map(type, values)) <= _PLAIN_NUMBERS:
        try:
            if all(map(math.isfinite, values)):
                return list(map(float, values))
        except OverflowError:  # an integer too large for a float
            pass
    return [_number(value, label, name) for value in values]


_PLAIN_NUMBERS = {int, float}


def _flag(value: object, label: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise ChunkError(f"{label}: {name} must be true or false")
    return value
