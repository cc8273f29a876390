"""The header of an `.npy` body, read without numpy's general parser. No Django.

numpy reads a header with `ast.literal_eval` (about 50 us, paid by the web process to validate every
reward request and again by the worker to decode it). The headers `np.save` writes have one fixed form,
`{'descr': '|u1', 'fortran_order': False, 'shape': (1, 128, 128, 3), }`, which a regular expression reads in
a few microseconds. Anything else gives None, and callers fall back to numpy's own reader.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass

import numpy as np

MAGIC = b"\x93NUMPY"
_CANONICAL = re.compile(
    rb"\{'descr': '(?P<descr>[|<>=][a-zA-Z][0-9]{0,2})', 'fortran_order': (?P<fortran>True|False), "
    rb"'shape': \((?P<shape>[0-9, ]*)\), \} *\n"
)
_LENGTH = {1: struct.Struct("<H"), 2: struct.Struct("<I"), 3: struct.Struct("<I")}


@dataclass(frozen=True)
class NpyHeader:
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    offset: int  # where the data starts

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def npy_header(raw: bytes | bytearray) -> NpyHeader | None:
    """The header of an `.npy` body as `np.save` writes it; None for any other form (use numpy's reader)."""
    if raw[:6] != MAGIC or len(raw) < 10:
        return None
    length = _LENGTH.get(raw[6])
    if length is None or raw[7] != 0:
        return None
    start = 8 + length.size
    (size,) = length.unpack_from(raw, 8)
    match = _CANONICAL.fullmatch(raw, start, start + size)
    if match is None:
        return None
    shape = tuple(int(v) for v in match["shape"].split(b",") if v.strip())
    return NpyHeader(shape, np.dtype(match["descr"].decode()), match["fortran"] == b"True", start + size)


def npy_array(raw: bytes | bytearray) -> np.ndarray | None:
    """The C-ordered array of an `.npy` body in `np.save`'s form, a view of `raw`'s own bytes (no copy:
    writable when `raw` is a bytearray, read-only for bytes); None for any other form. Raises ValueError
    when the body holds fewer bytes than its header says."""
    header = npy_header(raw)
    if header is None or header.fortran_order or header.dtype.hasobject:
        return None
    if len(raw) - header.offset < header.nbytes:
        raise ValueError(f"the .npy body is cut short: {len(raw) - header.offset} bytes for {header.nbytes}")
    flat = np.frombuffer(raw, dtype=header.dtype, count=math.prod(header.shape), offset=header.offset)
    return flat.reshape(header.shape)
