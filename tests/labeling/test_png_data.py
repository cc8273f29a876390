"""Ingest inflates a PNG's image data (bounded) before storing it: data that will not decode is refused
with a message, well-formed PNGs of every allowed kind pass and decode as checked."""

from __future__ import annotations

import io
import time
import tracemalloc

import numpy as np
import pytest
from PIL import Image

from common.images.checks import ImageError, check_image, check_png, decode_rgb, png_rows

from .broken_pngs import BROKEN_DATA, broken_png, good_png, pixels

LIMITS = {"max_side": 2048, "max_pixels": 2048 * 2048}


@pytest.mark.parametrize("kind", sorted(BROKEN_DATA))
def test_png_data_that_will_not_decode_is_refused_before_storing(kind):
    raw = broken_png(kind)
    with pytest.raises(ImageError) as refused:
        check_image(raw, **LIMITS)
    assert str(refused.value).startswith("undecodable image: ") and BROKEN_DATA[kind] in str(refused.value)
    if kind not in ("too many bytes", "bomb"):  # Pillow stops after the last row; the rest fail to decode
        with pytest.raises(ImageError):
            decode_rgb(raw)


def test_a_zlib_bomb_inside_a_small_png_is_refused_without_inflating_it():
    raw = broken_png("bomb")
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(ImageError):
        check_png(raw, **LIMITS)
    took = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 512 * 1024, peak  # pieces of 64 KiB, never the 256 MiB the data inflates to
    assert took < 1.0, took  # stops after the declared 1,168 bytes (+1), not after 256 MiB


@pytest.mark.parametrize("width,height", [(1, 1), (3, 2), (8, 8), (9, 17), (64, 5)])
@pytest.mark.parametrize("depth", [8, 16])
@pytest.mark.parametrize("interlaced", [False, True], ids=["plain", "adam7"])
def test_well_formed_pngs_pass_and_decode_as_checked(width, height, depth, interlaced):
    raw = good_png(width, height, interlaced=interlaced, depth=depth)
    assert check_image(raw, **LIMITS).width == width
    decoded = decode_rgb(raw)
    assert decoded.shape == (height, width, 3)
    if depth == 8:
        assert np.array_equal(decoded, pixels(width, height))  # the Adam7 passes as Pillow reads them


def test_pillow_written_pngs_pass_at_every_compression_level():
    image = pixels(100, 37, seed=3)
    for level in (0, 1, 6, 9):
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG", compress_level=level)
        assert check_png(buffer.getvalue(), **LIMITS) == (100, 37)


def test_adam7_sizes_follow_the_specification():
    assert png_rows(1, 1, 3, interlaced=True) == [(1, 4)]  # only the first pass holds a pixel
    assert png_rows(8, 8, 3, interlaced=True) == [(1, 4), (1, 4), (1, 7), (2, 7), (2, 13), (4, 13), (4, 25)]
    assert sum(r * (s - 1) for r, s in png_rows(13, 7, 6, interlaced=True)) == 13 * 7 * 6
