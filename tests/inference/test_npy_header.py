"""The fast `.npy` header reader agrees with numpy on what `np.save` writes and defers on anything else."""

from __future__ import annotations

import io

import numpy as np
import pytest

from inference.broker import load_npy
from inference.wire.npy_header import npy_array, npy_header
from inference.wire.payloads import PayloadError, npy_shape


def saved(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "array",
    [
        np.arange(2 * 5 * 4 * 3, dtype=np.uint8).reshape(2, 5, 4, 3),
        np.arange(7, dtype="<f4"),
        np.array(3, dtype=np.int64),
        np.zeros((0, 4, 4, 3), np.uint8),
    ],
)
def test_np_save_headers_are_read_fast_and_alike(array):
    raw = saved(array)
    header = npy_header(raw)
    assert header is not None and header.shape == array.shape and header.dtype == array.dtype
    decoded = npy_array(raw)
    assert decoded is not None and not decoded.flags.writeable  # a view of the received bytes, not a copy
    np.testing.assert_array_equal(decoded, array)
    received = bytearray(raw)  # what the worker reads a stored payload into
    writable = npy_array(received)
    assert writable is not None and writable.flags.writeable
    assert writable.size == 0 or np.shares_memory(writable, np.frombuffer(received, np.uint8))
    np.testing.assert_array_equal(writable, array)
    np.testing.assert_array_equal(load_npy(raw), array)


def test_other_headers_go_to_numpy():
    raw = saved(np.arange(12, dtype=np.uint8).reshape(1, 2, 2, 3))
    respaced = raw.replace(b"'shape': (", b"'shape':(", 1).replace(b"), }", b"),  }", 1)  # same length
    assert npy_header(respaced) is None and npy_array(respaced) is None
    np.testing.assert_array_equal(load_npy(respaced), np.arange(12, dtype=np.uint8).reshape(1, 2, 2, 3))
    assert npy_shape(respaced, max_side=64) == (1, 2, 2, 3)
    fortran = saved(np.asfortranarray(np.arange(6, dtype=np.uint8).reshape(2, 3)))
    assert npy_header(fortran).fortran_order and npy_array(fortran) is None  # numpy handles the layout
    assert npy_header(b"not an npy body") is None


def test_a_cut_body_is_an_error():
    raw = saved(np.zeros((1, 4, 4, 3), np.uint8))
    with pytest.raises(ValueError, match="cut short"):
        npy_array(raw[:-1])
    with pytest.raises(PayloadError, match="bytes of pixels"):
        npy_shape(raw[:-1], max_side=64)
