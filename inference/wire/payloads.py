"""Cheap validation of reward requests before anything reaches a worker. No Django.

An `.npy` body is checked from its header alone (dtype, shape, byte count) and forwarded to the worker
as is, so a valid batch is never decoded or copied on the web side. Every problem raises PayloadError
with a message fit for a 400 response.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from collections.abc import Sequence

import numpy as np

from common.images.budget import ImageTooLarge, PixelBudget
from common.images.checks import ImageError, check_image, decode_rgb
from inference.wire.npy_header import npy_header
from training.resnet.wire import JPEG_START, EncodedImage

MAX_ITEMS = 1024


class PayloadError(ValueError):
    pass


class PayloadTooLarge(PayloadError):
    """Over a size limit (answered with 413); the message names the setting."""


def _header(payload: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, where the data starts): np.save's form read fast, any other by numpy."""
    fast = npy_header(payload)
    if fast is not None:
        return fast.shape, fast.fortran_order, fast.dtype, fast.offset
    stream = io.BytesIO(payload)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise PayloadError(f"body is not a readable .npy array: {exc}") from None
    return shape, fortran, dtype, stream.tell()


def npy_shape(
    payload: bytes, *, max_side: int, max_items: int = MAX_ITEMS, max_request_pixels: int | None = None
) -> tuple[int, ...]:
    """The [B,H,W,3] shape of a uint8 `.npy` body, checked without reading its pixels."""
    if not payload:
        raise PayloadError("empty body: send a uint8 [B,H,W,3] array as .npy")
    shape, fortran, dtype, data_start = _header(payload)
    if dtype != np.uint8:
        raise PayloadError(f"images must be uint8, got {dtype}")
    check_shape(shape, max_side=max_side, max_items=max_items)
    if max_request_pixels is not None and math.prod(shape[:3]) > max_request_pixels:
        raise PayloadTooLarge(
            f"{shape[0]} images of {shape[2]}x{shape[1]} are more than {max_request_pixels} pixels (MAX_REQUEST_PIXELS)"
        )
    if fortran:
        raise PayloadError("images must be a C-ordered array")
    expected = data_start + math.prod(shape)
    if len(payload) != expected:
        raise PayloadError(
            f"body holds {len(payload) - data_start} bytes of pixels; shape {list(shape)} needs {math.prod(shape)}"
        )
    return tuple(int(v) for v in shape)


def check_shape(shape: Sequence[int], *, max_side: int, max_items: int = MAX_ITEMS) -> None:
    if len(shape) != 4 or shape[-1] != 3:
        raise PayloadError(f"images must have shape [B,H,W,3] (RGB), got {list(shape)}")
    if shape[0] == 0:
        raise PayloadError("empty batch: send at least one image")
    if shape[0] > max_items:
        raise PayloadTooLarge(f"at most {max_items} images per request, got {shape[0]}")
    if not (1 <= shape[1] <= max_side and 1 <= shape[2] <= max_side):
        raise PayloadError(f"images must be at most {max_side} px a side, got {shape[1]}x{shape[2]}")


def base64_image(text: object, where: str) -> bytes:
    """The encoded image of a base64 string (a data URL is fine); PayloadError naming `where` if it is none."""
    if not isinstance(text, str) or not text:
        raise PayloadError(f"{where}: expected a base64-encoded PNG or JPEG string")
    if text.startswith("data:"):
        text = text.split(",", 1)[1] if "," in text else ""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PayloadError(f"{where}: {exc}") from None


def images_checked_from_base64(
    items: object,
    *,
    max_side: int,
    max_pixels: int,
    max_items: int = MAX_ITEMS,
    max_request_pixels: int | None = None,
) -> list[EncodedImage]:
    """The encoded images of a list of base64 PNG/JPEG strings (data URLs accepted), undecoded: the count,
    every image's header size, the request's total pixels and the common size are checked."""
    if not isinstance(items, list):
        raise PayloadError("images must be a list of base64-encoded PNG or JPEG strings")
    if not items:
        raise PayloadError("empty batch: send at least one image")
    if len(items) > max_items:
        raise PayloadTooLarge(f"at most {max_items} images per request, got {len(items)}")
    budget = PixelBudget(
        max_side=max_side,
        max_pixels=max_pixels,
        max_request_pixels=max_request_pixels or max_pixels * max_items,
        max_images=max_items,
    )
    images = []
    for i, item in enumerate(items):
        raw = base64_image(item, f"images[{i}]")
        try:
            width, height = budget.charge(raw)
        except ImageTooLarge as exc:
            raise PayloadTooLarge(f"images[{i}]: {exc}") from None
        except ValueError as exc:  # ImageError is a ValueError
            raise PayloadError(f"images[{i}]: {exc}") from None
        if (width, height) != budget.sizes[0]:
            raise PayloadError(f"images[{i}] is {width}x{height}; all images of a batch must share one size")
        images.append(EncodedImage(raw, height, width))
    return images


def images_from_base64(
    items: object,
    *,
    max_side: int,
    max_pixels: int,
    max_items: int = MAX_ITEMS,
    max_request_pixels: int | None = None,
) -> np.ndarray:
    """A uint8 [B,H,W,3] batch from a list of base64 PNG/JPEG strings (data URLs accepted), every check of
    `images_checked_from_base64` made before the first pixel is decoded."""
    images = images_checked_from_base64(
        items, max_side=max_side, max_pixels=max_pixels, max_items=max_items, max_request_pixels=max_request_pixels
    )
    batch = np.empty((len(images), images[0].height, images[0].width, 3), dtype=np.uint8)
    for i, image in enumerate(images):
        try:
            if image.data.startswith(JPEG_START):  # decoding it is its check: once, not twice
                array = decode_rgb(image.data, require_rgb=True)
            else:  # a PNG's chunks walked (decoding refuses data that will not inflate)
                array = decode_rgb(
                    check_image(image.data, max_side=max_side, max_pixels=max_pixels, inflate=False).data
                )
        except (ImageError, ValueError) as exc:
            raise PayloadError(f"images[{i}]: {exc}") from None
        if array.shape != batch.shape[1:]:
            raise PayloadError(f"images[{i}]: its pixels do not match its header size")
        batch[i] = array
        images[i] = EncodedImage(b"", 0, 0)  # let each encoded image go once decoded
    return batch


def float_list(value: object, n: int, name: str) -> list[float] | None:
    """Optional per-item numbers: a list, or a comma-separated string (query/header)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = [v for v in value.split(",")]
    if not isinstance(value, list):
        raise PayloadError(f"{name} must be a list of {n} numbers")
    try:
        numbers = [float(v) for v in value]
    except (TypeError, ValueError):
        raise PayloadError(f"{name} must hold numbers") from None
    if len(numbers) != n:
        raise PayloadError(f"{name} has {len(numbers)} values for {n} images")
    if not all(math.isfinite(v) for v in numbers):
        raise PayloadError(f"{name} must be finite numbers")
    return numbers


_TRUE = {"1", "true", "yes", "t"}
_FALSE = {"0", "false", "no", "f", ""}


def bool_list(value: object, n: int, name: str) -> list[bool] | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = [v.strip().lower() for v in value.split(",")]
    if not isinstance(value, list) or len(value) != n:
        raise PayloadError(f"{name} must be a list of {n} booleans")
    flags = []
    for v in value:
        if isinstance(v, bool) or v in (0, 1):
            flags.append(bool(v))
        elif isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
            flags.append(v.strip().lower() in _TRUE)
        else:
            raise PayloadError(f"{name} must hold booleans (true/false or 1/0), got {v!r}")
    return flags


def id_list(value: object, n: int, name: str, max_chars: int = 100) -> list[str] | None:
    """Optional per-item ids (e.g. RL episode ids): a list, or a comma-separated string (query/header)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    if not isinstance(value, list) or len(value) != n:
        raise PayloadError(f"{name} must be a list of {n} ids")
    ids = [str(v) if isinstance(v, str | int) and not isinstance(v, bool) else None for v in value]
    if any(i is None for i in ids):
        raise PayloadError(f"{name} must hold strings or integers")
    if any(len(i) > max_chars for i in ids):  # type: ignore[arg-type]
        raise PayloadError(f"{name} values must be at most {max_chars} characters")
    return ids  # type: ignore[return-value]
