"""Pixel budgets: for requests, read from image headers before any pixel is decoded; for background
work, on the frames it holds decoded at once.

A 12 KB PNG can decode to 12 MiB, and a request can carry many images: every image's header (PNG
IHDR, JPEG SOF, `.npy` header) is read first, each image and the request's total are checked against
their limits, and only then are pixels decoded. Background tasks (the label queue, evaluation) go
through FrameBatches: one stored frame decoded at a time, shrunk to the size the task uses right away,
and handed on in batches of at most a budget of pixels; a frame that will not decode is skipped with
its reason instead of failing the task. No Django imports.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, UnidentifiedImageError

from .checks import NPY_MAGIC, PNG_SIGNATURE, ImageError, decode_rgb, png_size


class ImageTooLarge(ImageError):
    """All images of one request together exceed a count or pixel limit (answered with 413).

    One image over MAX_IMAGE_SIDE / MAX_IMAGE_PIXELS is a plain ImageError (a bad image, 400)."""


def header_size(raw: bytes) -> tuple[int, int]:
    """(width, height) from the header alone: no pixel data is inflated or decoded."""
    if not raw:
        raise ImageError("empty image")
    if raw.startswith(NPY_MAGIC):
        stream = io.BytesIO(raw)
        try:
            version = np.lib.format.read_magic(stream)
            reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, _ = reader(stream)
        except (ValueError, OSError, EOFError, SyntaxError) as exc:
            raise ImageError(f"unreadable .npy array: {exc}") from None
        if len(shape) != 3:
            raise ImageError(f"raw array must be HxWx3 (RGB), got shape {list(shape)}")
        return int(shape[1]), int(shape[0])
    if raw.startswith(PNG_SIGNATURE):
        return png_size(raw)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw), formats=["PNG", "JPEG"]) as image:
                return image.size
    except Image.DecompressionBombError:
        raise ImageError("image rejected as a decompression bomb") from None
    except UnidentifiedImageError:
        raise ImageError("undecodable image: not a PNG or JPEG file (or a uint8 .npy array)") from None
    except Exception as exc:  # Pillow raises many types for corrupt headers
        raise ImageError(f"undecodable image: {exc.__class__.__name__}: {exc}") from None


@dataclass
class PixelBudget:
    """Charges each image's header size against per-image and per-request limits (names used in messages)."""

    max_side: int
    max_pixels: int
    max_request_pixels: int
    max_images: int
    request_setting: str = "MAX_REQUEST_PIXELS"
    used: int = 0
    images: int = 0
    sizes: list[tuple[int, int]] = field(default_factory=list)

    def count(self, total: int) -> None:
        """Refuse a request by its image count alone, before reading any image."""
        if total > self.max_images:
            raise ImageTooLarge(f"{total} images in one request; the limit is {self.max_images}")

    def charge(self, raw: bytes) -> tuple[int, int]:
        width, height = header_size(raw)
        return self.charge_size(width, height)

    def charge_size(self, width: int, height: int) -> tuple[int, int]:
        if width < 1 or height < 1:
            raise ImageError("image has no pixels")
        if width > self.max_side or height > self.max_side or width * height > self.max_pixels:
            raise ImageError(  # a bad image (400), like check_image says; request totals are 413
                f"image is {width}x{height}; the limit is {self.max_side} px a side and {self.max_pixels} pixels"
            )
        self.images += 1
        self.count(self.images)
        self.used += width * height
        if self.used > self.max_request_pixels:
            raise ImageTooLarge(
                f"the images of this request decode to more than {self.max_request_pixels} pixels "
                f"({self.request_setting})"
            )
        self.sizes.append((width, height))
        return width, height


@dataclass(frozen=True)
class SkippedFrame:
    """A stored frame a task left out, and why (it cannot be read or will not decode)."""

    name: str
    reason: str


@dataclass
class FrameBatches:
    """Stored frames decoded one at a time and shrunk right after decoding (`shrink`: to the size the task
    uses them at), handed out in batches holding at most `budget_pixels` shrunk pixels (a single frame
    larger than that is a batch alone). A task going through it holds one full-size frame and one batch
    at most, whatever the number or size of the frames. With `decode_at_least` (width, height), frames at
    least twice that size are decoded reduced (`images.reduced_decode`) before `shrink`. Frames that cannot
    be read or decoded are left out and listed in `skipped` with the reason."""

    budget_pixels: int
    skipped: list[SkippedFrame] = field(default_factory=list)
    decode_at_least: tuple[int, int] | None = None

    def batches(
        self, names: Iterable[str], read: Callable[[str], bytes], shrink: Callable[[np.ndarray], np.ndarray]
    ) -> Iterator[tuple[list[int], list[np.ndarray]]]:
        """(positions in `names` of the frames kept, their shrunk arrays) per batch, in order."""
        kept: list[int] = []
        arrays: list[np.ndarray] = []
        held = 0
        for position, name in enumerate(names):
            try:
                small = shrink(decode_rgb(read(name), at_least=self.decode_at_least))
            except ImageError as exc:
                self.skipped.append(SkippedFrame(name, str(exc)))
                continue
            except OSError as exc:
                self.skipped.append(SkippedFrame(name, f"unreadable file: {exc.__class__.__name__}: {exc}"))
                continue
            pixels = int(small.shape[0]) * int(small.shape[1])
            if arrays and held + pixels > self.budget_pixels:
                yield kept, arrays
                kept, arrays, held = [], [], 0
            kept.append(position)
            arrays.append(small)
            held += pixels
        if arrays:
            yield kept, arrays
