"""Compressed frames (JPEG, PNG) through the inference broker to the ResNet scorer (no torch, no Django).

The broker carries one uint8 `.npy` array per request, first axis = items. A compressed frame travels as one row:
magic `RSIM`, its decoded height and width and its encoded length (big-endian 32-bit each), then the encoded
bytes, zero-padded to a multiple of `BUCKET` bytes (so frames of one camera from different requests usually land
in one batch). The scorer decodes the rows on its device (`training.resnet.image_decode`). Whoever packs frames
has read each one's header and checked it against the pixel budgets (and a PNG's inflate limits) first
(`common.images.budget`, `common.images.checks`): the sizes written here are those headers'.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAGIC = b"RSIM"
JPEG_START = b"\xff\xd8\xff"  # a JPEG file's first bytes (SOI and the next marker's 0xff)
BUCKET = 1 << 12
_HEAD = struct.Struct(">4sIII")  # magic, height, width, encoded bytes


@dataclass(frozen=True)
class EncodedImage:
    data: bytes  # a JPEG or PNG file's bytes
    height: int
    width: int


def images_pack(images: list[EncodedImage]) -> npt.NDArray[np.uint8]:
    """The rows of a broker payload, one per frame (all of one size: the model takes one batch)."""
    if not images:
        raise ValueError("no images to pack")
    if len({(i.height, i.width) for i in images}) != 1:
        raise ValueError("all images of a batch must share one size")
    rows = [_HEAD.pack(MAGIC, i.height, i.width, len(i.data)) + i.data for i in images]
    packed = np.zeros((len(rows), -(-max(map(len, rows)) // BUCKET) * BUCKET), dtype=np.uint8)
    for row, record in zip(packed, rows, strict=True):
        row[: len(record)] = np.frombuffer(record, dtype=np.uint8)
    return packed


def is_packed(batch: np.ndarray) -> bool:
    return batch.dtype == np.uint8 and batch.ndim == 2 and batch.shape[1] >= _HEAD.size and bytes(batch[0, :4]) == MAGIC


def images_unpack(batch: np.ndarray) -> list[EncodedImage]:
    images = []
    for index, row in enumerate(batch):
        magic, height, width, length = _HEAD.unpack_from(row.tobytes()[: _HEAD.size])
        if magic != MAGIC or _HEAD.size + length > len(row):
            raise ValueError(f"row {index} is not a packed image")
        images.append(EncodedImage(row[_HEAD.size : _HEAD.size + length].tobytes(), height, width))
    return images


def frame_at(batch: np.ndarray, index: int) -> np.ndarray | bytes:
    """Frame `index` of a broker batch: its pixels, or, in a batch of packed frames, its encoded bytes."""
    if is_packed(batch):
        return images_unpack(batch[index : index + 1])[0].data
    return batch[index]
