"""The agent <-> server WebSocket protocol (see PROTOCOL.md). Plain Python: the server imports it too.

A step travels as ONE binary WebSocket message:

    4 bytes   header length N, unsigned big-endian
    N bytes   header, UTF-8 JSON: {"type": "step", ..., "images": [{"camera", "format", "size"}, ...]}
    ...       the image files (JPEG or PNG bytes) back to back, in header order

Everything else is a JSON text message.
"""

from __future__ import annotations

import io
import json
import struct

import numpy as np
from PIL import Image

VERSION = 1
HEADER = struct.Struct(">I")
MAX_HEADER = 1 << 20
FORMATS = {"jpeg": "JPEG", "png": "PNG"}


class ProtocolError(ValueError):
    """A message that does not follow the protocol; the text says what is wrong."""


def encode_image(array: np.ndarray, fmt: str = "jpeg", quality: int = 85) -> bytes:
    buffer = io.BytesIO()
    image = Image.fromarray(np.ascontiguousarray(array, dtype=np.uint8), "RGB")
    if fmt == "jpeg":
        image.save(buffer, format="JPEG", quality=quality)
    elif fmt == "png":
        image.save(buffer, format="PNG", compress_level=1)
    else:
        raise ProtocolError(f"unknown image format {fmt!r}; use jpeg or png")
    return buffer.getvalue()


def decode_image(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def pack_step(header: dict, images: dict[str, bytes], fmt: str = "jpeg") -> bytes:
    """One binary step message: header (with an `images` table added) + the image bytes."""
    header = dict(header, type="step", images=[{"camera": c, "format": fmt, "size": len(b)} for c, b in images.items()])
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([HEADER.pack(len(head)), head, *images.values()])


def unpack_step(message: bytes) -> tuple[dict, dict[str, bytes]]:
    """Header and {camera: image bytes} of a binary step message; ProtocolError when malformed."""
    if len(message) < HEADER.size:
        raise ProtocolError("binary message shorter than its length prefix")
    (size,) = HEADER.unpack_from(message)
    if size > MAX_HEADER or HEADER.size + size > len(message):
        raise ProtocolError("header length prefix exceeds the message")
    try:
        header = json.loads(message[HEADER.size : HEADER.size + size])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict) or header.get("type") != "step":
        raise ProtocolError("binary messages must be steps (header type 'step')")
    for key in ("episode", "index"):
        if key not in header:
            raise ProtocolError(f"step header lacks {key!r}")
    if not isinstance(header["index"], int) or header["index"] < 0:
        raise ProtocolError("step index must be a non-negative integer")
    images: dict[str, bytes] = {}
    offset = HEADER.size + size
    table = header.get("images") or []
    if not isinstance(table, list):
        raise ProtocolError("images must be a list")
    for item in table:
        try:
            camera, length, fmt = str(item["camera"]), int(item["size"]), str(item.get("format", "jpeg"))
        except (KeyError, TypeError, ValueError):
            raise ProtocolError("each images entry needs camera and size") from None
        if fmt not in FORMATS:
            raise ProtocolError(f"image format {fmt!r} is not jpeg or png")
        if length < 0 or offset + length > len(message):
            raise ProtocolError(f"image {camera!r} runs past the end of the message")
        images[camera] = message[offset : offset + length]
        offset += length
    if offset != len(message):
        raise ProtocolError("trailing bytes after the last image")
    return header, images


def dumps(message: dict) -> str:
    return json.dumps(message, separators=(",", ":"))
