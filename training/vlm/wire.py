"""How a VLM window travels through the inference broker (no Django): the VLM family's input format,
written by the serving side (`inference`) and read by the family's scorer (`training.vlm.scorer`).

The broker carries one uint8 `.npy` array per request, first axis = items, and the worker batches items
of equal shape. A VLM item is a packed record: magic `RSVL`, a 4-byte big-endian header length, a JSON
header (image shapes, prompt, whether to generate, max new tokens), then the raw RGB bytes of every
image (main view frames first, then the extra view's). Records are zero-padded to a multiple of
`BUCKET` bytes so windows of the same size from different requests land in one batch (windows with the same
images and prompt always do; prompts of different lengths usually do).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

MAGIC = b"RSVL"
BUCKET = 1 << 12  # 4 KiB: small windows are not inflated (a 32 px window is 31 KB)
MAX_IMAGES = 64
MAX_NEW_TOKENS = 256
_LEN = struct.Struct(">I")


class WireError(ValueError):
    pass


@dataclass
class WindowRequest:
    images: list[npt.NDArray[np.uint8]]  # uint8 [H, W, 3] each: main view frames, then the extra view's
    prompt: str | None = None  # None: the model's own (trained) prompt
    generate: bool = False
    max_new_tokens: int = 16


def record_pack(item: WindowRequest) -> bytes:
    """One unpadded record (also how a stream step is buffered in Redis)."""
    if not item.images or len(item.images) > MAX_IMAGES:
        raise WireError(f"a window needs 1 to {MAX_IMAGES} images, got {len(item.images)}")
    shapes = []
    for image in item.images:
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise WireError("window images must be uint8 [H, W, 3]")
        shapes.append([int(image.shape[0]), int(image.shape[1])])
    header = json.dumps(
        {
            "shapes": shapes,
            "prompt": item.prompt,
            "generate": bool(item.generate),
            "max_new_tokens": max(1, min(int(item.max_new_tokens), MAX_NEW_TOKENS)),
        }
    ).encode()
    body = b"".join(np.ascontiguousarray(image).tobytes() for image in item.images)
    return MAGIC + _LEN.pack(len(header)) + header + body


def pack_windows(items: list[WindowRequest]) -> npt.NDArray[np.uint8]:
    """uint8 [B, N]: one zero-padded record per window."""
    return pad_records([record_pack(item) for item in items])


def pad_records(records: list[bytes]) -> npt.NDArray[np.uint8]:
    """uint8 [B, N]: the records (`record_pack`), each zero-padded to N, a multiple of BUCKET bytes."""
    size = max(len(r) for r in records)
    size = -(-size // BUCKET) * BUCKET
    out = np.zeros((len(records), size), dtype=np.uint8)
    for row, record in enumerate(records):
        out[row, : len(record)] = np.frombuffer(record, dtype=np.uint8)
    return out


def is_packed(batch: npt.NDArray[Any]) -> bool:
    return batch.ndim == 2 and batch.dtype == np.uint8 and batch.shape[1] >= 8 and bytes(batch[0, :4]) == MAGIC


def unpack_window(row: npt.NDArray[np.uint8]) -> WindowRequest:
    raw = row.tobytes()
    if raw[:4] != MAGIC:
        raise WireError("not a packed VLM window")
    (length,) = _LEN.unpack_from(raw, 4)
    try:
        header = json.loads(raw[8 : 8 + length])
        shapes = [(int(h), int(w)) for h, w in header["shapes"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(f"bad window header: {exc}") from None
    offset = 8 + length
    images = []
    for h, w in shapes:
        n = h * w * 3
        if offset + n > len(raw):
            raise WireError("window record is shorter than its images")
        images.append(np.frombuffer(raw, dtype=np.uint8, count=n, offset=offset).reshape(h, w, 3).copy())
        offset += n
    return WindowRequest(
        images=images,
        prompt=header.get("prompt"),
        generate=bool(header.get("generate")),
        max_new_tokens=int(header.get("max_new_tokens", 16)),
    )
