"""Crafted pickles that are small on disk but ask for huge allocations or work (resource bombs).

Each builder returns bytes; none of them runs code. Shared by the unpickler tests and the
live-server bomb tests.
"""

from __future__ import annotations

import io
import pickle

import torch


def bytearray_bomb(size: int = 2**32) -> bytes:
    """`bytearray(size)`: 33 bytes that allocate `size` bytes under a plain unpickler."""
    encoded = size.to_bytes((size.bit_length() + 8) // 8, "little", signed=True)
    return b"\x80\x04cbuiltins\nbytearray\n\x8a" + bytes([len(encoded)]) + encoded + b"\x85R."


def stateless_arrays(count: int = 40, side: int = 1024) -> bytes:
    """Arrays from numpy's `_reconstruct` with no BUILD: their memory would be uninitialised (old heap data)."""
    one = (
        b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n"
        + b"(J"
        + side.to_bytes(4, "little")
        + b"J"
        + side.to_bytes(4, "little")
        + b"K\x03tC\x01BtR"
    )
    return b"\x80\x04(" + one * count + b"l."


def stateless_episode(count: int = 4, side: int = 256) -> bytes:
    """An RLinf-shaped episode whose frames are arrays reconstructed without state."""
    frame = (
        b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n(J"
        + side.to_bytes(4, "little")
        + b"J"
        + side.to_bytes(4, "little")
        + b"K\x03tC\x01BtR"
    )
    observations = b"(" + b"".join(b"}X\x0b\x00\x00\x00main_images" + frame + b"s" for _ in range(count)) + b"l"
    data = pickle.dumps(
        {
            "success": True,
            "actions": [[0.0] * 7] * (count - 1),
            "rewards": [0.0] * count,
            "terminated": [False] * count,
            "truncated": [False] * count,
            "infos": [{}] * count,
        },
        protocol=4,
    )
    # Append "observations": <list> to the dict before STOP.
    assert data.endswith(b"u.")
    return data[:-1] + b"X\x0c\x00\x00\x00observations" + observations + b"s."


def shared_nesting(levels: int = 60) -> bytes:
    """Each list holds the previous one twice: tiny on disk, 2**levels values once expanded (to JSON)."""
    value: list = []
    for _ in range(levels):
        value = [value, value]
    return pickle.dumps(value, protocol=4)


def shared_nesting_episode(levels: int = 50) -> bytes:
    value: list = []
    for _ in range(levels):
        value = [value, value]
    episode = {
        "success": True,
        "observations": [{}, {}],
        "actions": [[0.0]],
        "rewards": [0.0, 0.0],
        "terminated": [False, False],
        "truncated": [False, False],
        "infos": [{"bomb": value}, {}],
    }
    return pickle.dumps(episode, protocol=4)


def zero_strides(elements: int = 10**9) -> bytes:
    """One stored float viewed as `elements` floats through a zero stride."""
    return pickle.dumps(torch.zeros(1).expand(elements), protocol=4)


def cycle() -> bytes:
    value: list = []
    value.append(value)
    return pickle.dumps(value, protocol=4)


def length_past_end(size: int = 2**40) -> bytes:
    """BINBYTES8 claiming `size` bytes that the file does not have."""
    return b"\x80\x04\x8e" + size.to_bytes(8, "little") + b"abc."


def huge_state_shape() -> bytes:
    """A numpy array whose BUILD state claims a billion elements but carries three bytes."""
    return (
        b"\x80\x04cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n(K\x00tC\x01BtR"
        b"(K\x01J\x00\xca\x9a;\x85cnumpy\ndtype\n(X\x02\x00\x00\x00u1\x89\x88tR"
        b"(K\x03X\x01\x00\x00\x00|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89C\x03abctb."
    )


class _StorageBomb:
    """Pickles as `torch.storage._load_from_bytes(payload)` with a header declaring `elements` floats."""

    def __init__(self, elements: int):
        buffer = io.BytesIO()
        torch.save(torch.zeros(3).untyped_storage(), buffer, _use_new_zipfile_serialization=False)
        payload = buffer.getvalue()
        marker = b"cpuq\x03K\x0c"  # the device, then the storage's size (12 bytes) as BININT1
        assert marker in payload
        self.payload = payload.replace(marker, b"cpuq\x03J" + elements.to_bytes(4, "little"), 1)

    def __reduce__(self):
        return torch.storage._load_from_bytes, (self.payload,)


def storage_bomb(elements: int = 2**31 - 1) -> bytes:
    return pickle.dumps(_StorageBomb(elements), protocol=4)


ALL = {
    "bytearray": bytearray_bomb,
    "stateless-arrays": stateless_arrays,
    "shared-nesting": shared_nesting,
    "zero-strides": zero_strides,
    "cycle": cycle,
    "length-past-end": length_past_end,
    "huge-state-shape": huge_state_shape,
    "storage-bomb": storage_bomb,
}
