"""A binary step chunk (robot_agent.chunk_format) to the steps `services.steps_append` stores.

Layout, field types and every limit (header bytes and nesting depth, steps and images per chunk, each
step's `info` size, each image's size and the chunk's decoded pixels) are checked before any image is
looked at; the header's size and depth before it is parsed; PNGs are then checked from their
bytes (IHDR, CRCs) and never inflated. Used by the ASGI fast path and the DRF view alike: it takes
bytes and limits as arguments, not a request object.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.images.budget import ImageTooLarge, PixelBudget
from common.images.checks import ImageError, check_image
from common.json_limits import JSONTooDeep, depth_check, size_of
from robot_agent.chunk_format import PREFIX, ChunkError, ChunkLimits, ChunkTooLarge, decode_chunk

from .services import StepInput


class ChunkRefused(ValueError):
    """A chunk that cannot be stored; `status` is 400 (bad input) or 413 (over a limit)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class IngestLimits:
    max_header_bytes: int
    max_steps: int
    max_images: int
    max_side: int
    max_pixels: int
    max_request_pixels: int
    max_depth: int = 64
    max_info_bytes: int = 64 * 1024

    @classmethod
    def from_settings(cls) -> IngestLimits:
        from django.conf import settings

        return cls(
            max_header_bytes=settings.CHUNK_HEADER_MAX_BYTES,
            max_steps=settings.INGEST_MAX_STEPS_PER_CHUNK,
            max_images=settings.INGEST_MAX_IMAGES_PER_CHUNK,
            max_side=settings.MAX_IMAGE_SIDE,
            max_pixels=settings.MAX_IMAGE_PIXELS,
            max_request_pixels=settings.MAX_REQUEST_PIXELS,
            max_depth=settings.JSON_MAX_DEPTH,
            max_info_bytes=settings.JSON_FIELD_MAX_BYTES,
        )


SETTING_NAMES = {
    "header": "CHUNK_HEADER_MAX_BYTES",
    "steps in one chunk": "INGEST_MAX_STEPS_PER_CHUNK",
    "images in one chunk": "INGEST_MAX_IMAGES_PER_CHUNK",
}


def chunk_steps(body: bytes, limits: IngestLimits) -> list[StepInput]:
    """The chunk's steps with checked images. Raises ChunkRefused (400 or 413) naming what is wrong."""
    _header_depth_check(body, limits)
    try:
        steps = decode_chunk(body, ChunkLimits(limits.max_header_bytes, limits.max_steps, limits.max_images))
    except ChunkTooLarge as exc:
        raise ChunkRefused(413, _with_setting(str(exc))) from None
    except ChunkError as exc:
        raise ChunkRefused(400, str(exc)) from None
    for step in steps:
        info_bytes = size_of(step.info)
        if info_bytes > limits.max_info_bytes:
            raise ChunkRefused(
                413,
                f"step {step.index}: info of {info_bytes} bytes; the limit is {limits.max_info_bytes} (JSON_FIELD_MAX_BYTES)",
            )
    budget = PixelBudget(
        max_side=limits.max_side,
        max_pixels=limits.max_pixels,
        max_request_pixels=limits.max_request_pixels,
        max_images=limits.max_images,
    )
    raw = [(step.index, camera, bytes(view)) for step in steps for camera, view in step.images.items()]
    for index, camera, data in raw:  # every header first: the chunk's pixels are known before any check
        try:
            budget.charge(data)
        except ImageTooLarge as exc:
            raise ChunkRefused(413, f"step {index}: images.{camera}: {exc}") from None
        except ImageError as exc:
            raise ChunkRefused(400, f"step {index}: images.{camera}: {exc}") from None
    inputs = [StepInput.of(step) for step in steps]
    by_index = {step.index: step for step in inputs}
    if len(by_index) != len(inputs):
        raise ChunkRefused(400, "a chunk lists the same step index twice")
    for index, camera, data in raw:
        try:
            by_index[index].images[camera] = check_image(data, max_side=limits.max_side, max_pixels=limits.max_pixels)
        except ImageError as exc:
            raise ChunkRefused(400, f"step {index}: images.{camera}: {exc}") from None
    return inputs


def _header_depth_check(body: bytes, limits: IngestLimits) -> None:
    """400 for a header nested deeper than `max_depth`, before it is parsed (the decoder recurses per level).
    A prefix that is malformed or over the size limit is left to decode_chunk, which says so."""
    if len(body) < PREFIX.size:
        return
    size = PREFIX.unpack_from(body)[1]
    if size <= limits.max_header_bytes:
        try:
            depth_check(memoryview(body)[PREFIX.size : PREFIX.size + size], limits.max_depth, "chunk header")
        except JSONTooDeep as exc:
            raise ChunkRefused(400, str(exc)) from None


def _with_setting(message: str) -> str:
    for words, setting in SETTING_NAMES.items():
        if words in message:
            return f"{message} ({setting})"
    return message
