"""PNGs whose every chunk is well formed (lengths, CRCs, IEND last) but whose compressed image data will
not decode, and well-formed PNGs Pillow does not write (Adam7-interlaced, 16-bit)."""

from __future__ import annotations

import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_from_data(width: int, height: int, data: bytes, *, depth: int = 8, interlace: int = 0) -> bytes:
    """A PNG with these compressed bytes as its image data, split over two IDAT chunks; every CRC valid."""
    header = struct.pack(">IIBBBBB", width, height, depth, 2, 0, 0, interlace)
    half = len(data) // 2
    return (
        SIGNATURE
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", data[:half])
        + chunk(b"IDAT", data[half:])
        + chunk(b"IEND", b"")
    )


def scanlines(image: np.ndarray, *, interlaced: bool = False) -> bytes:
    """The image's rows, each after filter type 0, as one pass or Adam7's seven."""
    if not interlaced:
        return b"".join(b"\0" + row.tobytes() for row in image)
    passes = [image[y0::dy, x0::dx] for x0, y0, dx, dy in ADAM7]
    return b"".join(b"\0" + row.tobytes() for part in passes if part.shape[1] for row in part)


def pixels(width: int, height: int, seed: int = 0, dtype=np.uint8) -> np.ndarray:
    top = 256 if dtype == np.uint8 else 65536
    return np.random.default_rng(seed).integers(0, top, (height, width, 3)).astype(dtype)


def good_png(width: int = 24, height: int = 16, *, interlaced: bool = False, depth: int = 8) -> bytes:
    image = pixels(width, height, dtype=np.uint8 if depth == 8 else np.dtype(">u2"))
    data = zlib.compress(scanlines(image, interlaced=interlaced))
    return png_from_data(width, height, data, depth=depth, interlace=int(interlaced))


def broken_png(kind: str, width: int = 24, height: int = 16) -> bytes:
    """A well-chunked PNG whose image data is broken in the way `kind` names (BROKEN_DATA's keys)."""
    rows = scanlines(pixels(width, height))
    data = zlib.compress(rows)
    if kind == "corrupt stream":
        data = data[:10] + bytes(b ^ 0x5A for b in data[10:30]) + data[30:]
    elif kind == "cut short":
        data = data[: len(data) // 2]
    elif kind == "too few bytes":
        data = zlib.compress(rows[:-1])
    elif kind == "too many bytes":
        data = zlib.compress(rows + b"\0" * 9)
    elif kind == "unknown filter":
        data = zlib.compress(b"\x07" + rows[1:])
    elif kind == "bomb":
        data = zlib.compress(bytes(256 * 1024 * 1024), 9)  # 256 MiB of zeros in about 250 KB
    else:
        raise ValueError(kind)
    return png_from_data(width, height, data)


BROKEN_DATA = {  # kind: what the refusal says
    "corrupt stream": "compressed image data is corrupt",
    "cut short": "image data ends early",
    "too few bytes": "inflates to 1167 bytes, its header says 1168",
    "too many bytes": "inflates to more than the 1168 bytes its header says",
    "unknown filter": "unknown filter type 7",
    "bomb": "inflates to more than the 1168 bytes its header says",
}
