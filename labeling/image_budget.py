"""Pixel budgets read from image headers, so a request's decoded size is known before any pixel is decoded.

A 12 KB PNG can decode to 12 MiB, and a request can carry many images: every image's header (PNG
IHDR, JPEG SOF, `.npy` header) is read first, each image and the request's total are checked against
their limits, and only then are pixels decoded. No Django imports.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, UnidentifiedImageError

from .images import NPY_MAGIC, PNG_SIGNATURE, ImageError, png_size


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
