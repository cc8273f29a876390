"""Background decoding within a pixel budget: frames decoded one at a time, shrunk at once, handed on in
batches no larger than the budget; frames that cannot be read or decoded are skipped with the reason."""

from __future__ import annotations

import numpy as np

from common.images.budget import FrameBatches
from common.images.checks import encode_array

from .broken_pngs import broken_png


def stored(size: int, seed: int) -> bytes:
    image = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return encode_array(image, max_side=4096, max_pixels=1 << 24).data


def test_batches_hold_at_most_the_budget_of_shrunk_pixels_and_keep_the_order():
    files = {f"f{i}": stored(40, i) for i in range(10)}
    batches = FrameBatches(budget_pixels=3 * 8 * 8)
    seen = []
    for positions, arrays in batches.batches(list(files), files.__getitem__, lambda image: image[::5, ::5]):
        assert sum(a.shape[0] * a.shape[1] for a in arrays) <= 3 * 8 * 8 and len(positions) == len(arrays)
        seen += positions
        assert all(a.shape == (8, 8, 3) for a in arrays)
    assert seen == list(range(10)) and batches.skipped == []


def test_frames_that_cannot_be_read_or_decoded_are_skipped_with_the_reason():
    files = {"good": stored(16, 0), "broken": broken_png("corrupt stream"), "other": stored(16, 1)}

    def read(name: str) -> bytes:
        if name == "gone":
            raise FileNotFoundError(f"no such file: {name}")
        return files[name]

    batches = FrameBatches(budget_pixels=10_000)
    out = list(batches.batches(["good", "broken", "gone", "other"], read, lambda image: image))
    assert [positions for positions, _ in out] == [[0, 3]]
    reasons = {s.name: s.reason for s in batches.skipped}
    assert set(reasons) == {"broken", "gone"}
    assert reasons["broken"].startswith("undecodable image: ") and "unreadable file" in reasons["gone"]


def test_a_frame_larger_than_the_budget_is_a_batch_alone():
    files = {"a": stored(16, 0), "b": stored(16, 1)}
    out = list(FrameBatches(budget_pixels=100).batches(list(files), files.__getitem__, lambda image: image))
    assert [positions for positions, _ in out] == [[0], [1]]
