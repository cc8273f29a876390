"""Decoding and validating uploaded frames without trusting them.

Accepts PNG/JPEG bytes or a raw uint8 HWC array serialised as `.npy`. Pillow's decompression-bomb
guard is set from our own pixel limit, headers are checked before pixels are decoded, and every
problem raises ImageError with a message fit for a 4xx response. PNGs are checked chunk by chunk
from their bytes alone (signature, IHDR size and colour type, every CRC, IEND last) without inflating
the pixels or opening them with Pillow; JPEGs are decoded.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

NPY_MAGIC = b"\x93NUMPY"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ALLOWED_FORMATS = {"PNG": ".png", "JPEG": ".jpg"}
_CHUNK = struct.Struct(">I4s")
_IHDR = struct.Struct(">IIBBBBB")
_PNG_CRITICAL = {b"IHDR", b"PLTE", b"IDAT", b"IEND"}
_PNG_RGB = 2  # IHDR colour type of truecolour without alpha


class ImageError(ValueError):
    pass


@dataclass(frozen=True)
class CheckedImage:
    """An image that passed validation, ready to store: encoded bytes, extension and size."""

    data: bytes
    extension: str
    width: int
    height: int


def check_image(raw: bytes, *, max_side: int, max_pixels: int) -> CheckedImage:
    if not raw:
        raise ImageError("empty image")
    if raw.startswith(NPY_MAGIC):
        array = _load_npy(raw)
        return encode_array(array, max_side=max_side, max_pixels=max_pixels)
    if raw.startswith(PNG_SIGNATURE):
        width, height = check_png(raw)
        _check_size(width, height, max_side=max_side, max_pixels=max_pixels)
        return CheckedImage(bytes(raw), ".png", width, height)
    return _check_encoded(raw, max_side=max_side, max_pixels=max_pixels)


def png_size(raw: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk alone."""
    if not raw.startswith(PNG_SIGNATURE):
        raise ImageError("not a PNG file")
    if len(raw) < 33:
        raise ImageError("undecodable image: PNG file ends inside its header")
    length, kind = _CHUNK.unpack_from(raw, 8)
    if kind != b"IHDR" or length != 13:
        raise ImageError("undecodable image: a PNG file must start with a 13-byte IHDR chunk")
    width, height = _IHDR.unpack_from(raw, 16)[:2]
    return width, height


def check_png(raw: bytes) -> tuple[int, int]:
    """(width, height) of a well-formed 8- or 16-bit RGB PNG, checked without inflating any pixel.

    Walks every chunk: lengths stay inside the file, every CRC matches, no unknown critical chunk, at
    least one IDAT, and IEND ends the file."""
    width, height = png_size(raw)
    _, _, depth, colour, compression, filtering, interlace = _IHDR.unpack_from(raw, 16)
    if colour != _PNG_RGB or depth not in (8, 16):
        raise ImageError(f"image must be RGB with 3 channels, got PNG colour type {colour} at {depth} bits")
    if compression or filtering or interlace > 1:
        raise ImageError("undecodable image: unknown PNG compression, filter or interlace method")
    view, offset, size, idat = memoryview(raw), 8, len(raw), False
    while True:
        if offset + 12 > size:
            raise ImageError("undecodable image: PNG file is truncated (no IEND chunk)")
        length, kind = _CHUNK.unpack_from(raw, offset)
        end = offset + 8 + length
        if end + 4 > size:
            raise ImageError(f"undecodable image: PNG file is truncated ({kind.decode('latin-1')!r} chunk cut short)")
        (crc,) = struct.unpack_from(">I", raw, end)
        if zlib.crc32(view[offset + 4 : end]) != crc:
            raise ImageError(f"undecodable image: PNG chunk {kind.decode('latin-1')!r} fails its CRC check")
        if kind[0] & 0x20 == 0 and kind not in _PNG_CRITICAL:
            raise ImageError(f"undecodable image: unknown critical PNG chunk {kind.decode('latin-1')!r}")
        idat |= kind == b"IDAT"
        offset = end + 4
        if kind == b"IEND":
            break
    if not idat:
        raise ImageError("undecodable image: PNG file has no image data (IDAT)")
    if offset != size:
        raise ImageError(f"undecodable image: {size - offset} bytes after the PNG's IEND chunk")
    return width, height


def encode_array(array: np.ndarray, *, max_side: int, max_pixels: int) -> CheckedImage:
    """A uint8 HxWx3 array as PNG bytes (fast compression: frames are written far more than read)."""
    if array.dtype != np.uint8:
        raise ImageError(f"raw array must be uint8, got {array.dtype}")
    if array.ndim != 3 or array.shape[2] != 3:
        raise ImageError(f"raw array must be HxWx3 (RGB), got shape {list(array.shape)}")
    height, width = int(array.shape[0]), int(array.shape[1])
    _check_size(width, height, max_side=max_side, max_pixels=max_pixels)
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array), "RGB").save(buffer, format="PNG", compress_level=1)
    return CheckedImage(buffer.getvalue(), ".png", width, height)


def decode_rgb(raw: bytes) -> np.ndarray:
    """Stored frame bytes (already validated) to a uint8 HxWx3 array."""
    with Image.open(io.BytesIO(raw)) as image:
        return np.asarray(image.convert("RGB"))


def _load_npy(raw: bytes) -> np.ndarray:
    try:
        return np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ImageError(f"unreadable .npy array: {exc}") from None


def _check_size(width: int, height: int, *, max_side: int, max_pixels: int) -> None:
    if width < 1 or height < 1:
        raise ImageError("image has no pixels")
    if width > max_side or height > max_side or width * height > max_pixels:
        raise ImageError(f"image is {width}x{height}; the limit is {max_side} px a side and {max_pixels} pixels")


def _check_encoded(raw: bytes, *, max_side: int, max_pixels: int) -> CheckedImage:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw), formats=list(ALLOWED_FORMATS)) as image:
                fmt = str(image.format)  # one of ALLOWED_FORMATS: Image.open was limited to them
                width, height = image.size
                _check_size(width, height, max_side=max_side, max_pixels=max_pixels)
                if image.mode != "RGB":
                    raise ImageError(f"image must be RGB with 3 channels, got mode {image.mode}")
                if fmt == "PNG":
                    image.verify()  # walks every chunk and checks its CRC without inflating the pixels
                else:
                    image.load()  # decodes every pixel: truncated or corrupt data fails here
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageError("image rejected as a decompression bomb") from None
    except UnidentifiedImageError:
        raise ImageError("undecodable image: not a PNG or JPEG file (or a uint8 .npy array)") from None
    except Exception as exc:  # Pillow raises many types for corrupt input
        raise ImageError(f"undecodable image: {exc.__class__.__name__}: {exc}") from None
    return CheckedImage(raw, ALLOWED_FORMATS[fmt], width, height)
