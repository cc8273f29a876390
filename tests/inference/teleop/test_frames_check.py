"""A step's images are checked, and the scored camera decoded, in one pass (one thread hop per step)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from common.images.checks import ImageError
from inference.teleop.stream import frames_check
from robot_agent.protocol import encode_image


def _chunks(png: bytes) -> list[bytes]:
    """The PNG's chunks, each whole (length, type, data, CRC)."""
    chunks, at = [], 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        chunks.append(png[at : at + 12 + length])
        at += 12 + length
    return chunks


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_the_scored_camera_comes_back_decoded_and_every_camera_checked(fmt):
    frame = np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    images = {"main": encode_image(frame, fmt), "extra": encode_image(frame[:, ::-1], fmt)}
    checked, pixels = frames_check(images, decode="main")
    assert set(checked) == {"main", "extra"} and (checked["main"].width, checked["main"].height) == (32, 24)
    assert pixels is not None and pixels.shape == (24, 32, 3) and pixels.dtype == np.uint8
    if fmt == "png":  # lossless
        assert np.array_equal(pixels, frame)
    assert frames_check(images)[1] is None  # nothing scored: nothing decoded


def test_a_scored_png_whose_pixels_do_not_decode_is_refused_naming_its_camera():
    big = encode_image(np.zeros((32, 32, 3), np.uint8), "png")
    small = encode_image(np.zeros((8, 8, 3), np.uint8), "png")
    # the 32x32 header with the 8x8 image's data: every chunk well formed, the pixels too few
    spliced = big[:8] + _chunks(big)[0] + b"".join(_chunks(small)[1:])
    good = encode_image(np.zeros((32, 32, 3), np.uint8), "png")
    with pytest.raises(ImageError, match="camera 'main'"):
        frames_check({"main": spliced, "extra": good}, decode="main")
    with pytest.raises(ImageError, match="camera 'extra'"):
        frames_check({"main": good, "extra": spliced}, decode="main")
