"""Decoding and validating uploaded frames without trusting them.

Accepts PNG/JPEG bytes or a raw uint8 HWC array serialised as `.npy`. Pillow's decompression-bomb
guard is set from our own pixel limit, headers are checked before pixels are decoded, and every
problem raises ImageError with a message fit for a 4xx response. PNGs are checked chunk by chunk
from their bytes alone (signature, IHDR size and colour type, every CRC, IEND last), then their
compressed data is inflated piece by piece and thrown away (never more than 64 KiB of it in memory): it
must inflate to exactly the size the IHDR declares, and every row must start with a known filter type,
so a PNG whose chunks are valid but whose pixels will not decode is refused at ingest. JPEGs are decoded.
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
_PNG_FILTERS = 5  # filter types 0-4 (none, sub, up, average, Paeth) start every row
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
_INFLATE_PIECE = 64 * 1024  # bytes inflated at a time while checking a PNG's data


class ImageError(ValueError):
    pass


@dataclass(frozen=True)
class CheckedImage:
    """An image that passed validation, ready to store: encoded bytes, extension and size."""

    data: bytes
    extension: str
    width: int
    height: int


def check_image(raw: bytes, *, max_side: int, max_pixels: int, inflate: bool = True) -> CheckedImage:
    """`raw` validated for storing. `inflate=False` leaves a PNG's image data unchecked, for callers that
    decode it at once (decode_rgb refuses data that will not decode, and reads no more than the IHDR's size)."""
    if not raw:
        raise ImageError("empty image")
    if raw.startswith(NPY_MAGIC):
        array = _load_npy(raw)
        return encode_array(array, max_side=max_side, max_pixels=max_pixels)
    if raw.startswith(PNG_SIGNATURE):
        width, height = check_png(raw, max_side=max_side, max_pixels=max_pixels, inflate=inflate)
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


def check_png(raw: bytes, *, max_side: int, max_pixels: int, inflate: bool = True) -> tuple[int, int]:
    """(width, height) of a well-formed 8- or 16-bit RGB PNG within the size limits.

    Walks every chunk: lengths stay inside the file, every CRC matches, no unknown critical chunk, at
    least one IDAT, and IEND ends the file. Then (unless `inflate` is off) inflates the image data
    (check_png_data)."""
    width, height = png_size(raw)
    _check_size(width, height, max_side=max_side, max_pixels=max_pixels)
    _, _, depth, colour, compression, filtering, interlace = _IHDR.unpack_from(raw, 16)
    if colour != _PNG_RGB or depth not in (8, 16):
        raise ImageError(f"image must be RGB with 3 channels, got PNG colour type {colour} at {depth} bits")
    if compression or filtering or interlace > 1:
        raise ImageError("undecodable image: unknown PNG compression, filter or interlace method")
    view, offset, size, idat = memoryview(raw), 8, len(raw), []
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
        if kind == b"IDAT":
            idat.append(view[offset + 8 : end])
        offset = end + 4
        if kind == b"IEND":
            break
    if not idat:
        raise ImageError("undecodable image: PNG file has no image data (IDAT)")
    if offset != size:
        raise ImageError(f"undecodable image: {size - offset} bytes after the PNG's IEND chunk")
    if inflate:
        check_png_data(idat, png_rows(width, height, 3 * depth // 8, interlaced=interlace == 1))
    return width, height


def png_rows(width: int, height: int, pixel_bytes: int, *, interlaced: bool) -> list[tuple[int, int]]:
    """(rows, bytes per row including its filter byte) of each pass of a PNG's inflated data: one pass,
    or Adam7's seven (passes with no pixel left out, as the PNG specification says)."""
    if not interlaced:
        return [(height, 1 + width * pixel_bytes)]
    passes = []
    for x0, y0, dx, dy in _ADAM7:
        columns, rows = (width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy
        if columns > 0 and rows > 0:
            passes.append((rows, 1 + columns * pixel_bytes))
    return passes


def check_png_data(idat: list[memoryview], passes: list[tuple[int, int]]) -> None:
    """The concatenated IDAT chunks must be one zlib stream that inflates to exactly the bytes `passes`
    (png_rows) declare, each row starting with a filter type 0-4. Inflated in pieces of at most
    _INFLATE_PIECE bytes that are dropped once checked, so a bomb costs no memory."""
    expected = sum(rows * stride for rows, stride in passes)
    offsets = np.cumsum([0] + [rows * stride for rows, stride in passes])[:-1]
    starts = np.concatenate(
        [np.arange(rows, dtype=np.int64) * stride + base for (rows, stride), base in zip(passes, offsets, strict=True)]
    )
    inflater = zlib.decompressobj()
    done = 0
    try:
        for data in idat:
            pending: bytes | memoryview = data
            while pending and not inflater.eof:
                piece = inflater.decompress(pending, min(_INFLATE_PIECE, expected + 1 - done))
                pending = inflater.unconsumed_tail
                done = _check_rows(piece, done, starts, expected)
        while not inflater.eof and done <= expected:
            piece = inflater.decompress(b"", min(_INFLATE_PIECE, expected + 1 - done))
            if not piece:
                break
            done = _check_rows(piece, done, starts, expected)
    except zlib.error as exc:
        raise ImageError(f"undecodable image: the PNG's compressed image data is corrupt ({exc})") from None
    if not inflater.eof:
        raise ImageError(f"undecodable image: the PNG's image data ends early ({done} of {expected} bytes inflated)")
    if done != expected:
        raise ImageError(
            f"undecodable image: the PNG's image data inflates to {done} bytes, its header says {expected}"
        )


def _check_rows(piece: bytes, done: int, starts: np.ndarray, expected: int) -> int:
    """Checks the filter bytes that fall in `piece` (inflated bytes done..); returns the new count."""
    end = done + len(piece)
    if end > expected:
        raise ImageError(
            f"undecodable image: the PNG's image data inflates to more than the {expected} bytes its header says"
        )
    lo, hi = np.searchsorted(starts, [done, end])
    if hi > lo:
        filters = np.frombuffer(piece, dtype=np.uint8)[starts[lo:hi] - done]
        bad = np.flatnonzero(filters >= _PNG_FILTERS)
        if bad.size:
            row, kind = int(lo + bad[0]), int(filters[bad[0]])
            raise ImageError(f"undecodable image: PNG row {row} (of all passes) has unknown filter type {kind}")
    return end


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


def decode_rgb(raw: bytes, *, require_rgb: bool = False, at_least: tuple[int, int] | None = None) -> np.ndarray:
    """Stored or checked PNG/JPEG bytes to a uint8 HxWx3 array; ImageError naming the problem when they
    will not decode (a frame stored before ingest inflated PNG data, or a file damaged since). With
    `require_rgb`, an image of another mode is refused rather than converted (what `check_image` refuses).
    With `at_least` (width, height), a frame at least twice as large on both sides comes back reduced by a
    whole factor (`reduced_decode`), still at least twice `at_least`."""
    try:
        with Image.open(io.BytesIO(raw), formats=list(ALLOWED_FORMATS)) as image:
            if require_rgb and image.mode != "RGB":
                raise ImageError(f"image must be RGB with 3 channels, got mode {image.mode}")
            if at_least is not None:
                return np.asarray(reduced_decode(image, at_least).convert("RGB"))
            return np.asarray(image if image.mode == "RGB" else image.convert("RGB"))
    except ImageError:
        raise
    except Image.DecompressionBombError:
        raise ImageError("image rejected as a decompression bomb") from None
    except UnidentifiedImageError:
        raise ImageError("undecodable image: not a PNG or JPEG file") from None
    except Exception as exc:  # Pillow raises many types for corrupt data (OSError, SyntaxError, zlib.error...)
        raise ImageError(f"undecodable image: {exc.__class__.__name__}: {exc}") from None


def reduced_decode(image: Image.Image, at_least: tuple[int, int]) -> Image.Image:
    """`image` decoded at the size a task needs: reduced by the largest whole factor that keeps it at least
    twice `at_least` (width, height) on each side; the bilinear resize to the model's input then starts
    from there. A JPEG is decoded at that scale (libjpeg's DCT scaling: the full-size pixels never exist); a
    PNG is decoded whole and box-reduced at once, so what is held on is the reduced image."""
    width, height = image.size
    factor = min(width // (2 * max(1, at_least[0])), height // (2 * max(1, at_least[1])))
    if factor < 2:
        return image
    if image.format == "JPEG":
        image.draft("RGB", (width // factor, height // factor))  # scales by 1/2, 1/4 or 1/8, never below
        width, height = image.size
        factor = min(width // (2 * max(1, at_least[0])), height // (2 * max(1, at_least[1])))
        if factor < 2:
            return image
    if image.mode not in ("RGB", "RGBA", "L", "LA"):  # a palette image cannot be box-reduced as it is
        image = image.convert("RGB")
    return image.reduce(factor)


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
