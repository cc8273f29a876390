"""The binary step-chunk format on its own: what the uploader encodes is what the server decodes."""

from __future__ import annotations

import pytest

from robot_agent.chunk_format import ChunkError, ChunkLimits, ChunkTooLarge, decode_chunk, encode_chunk

LIMITS = ChunkLimits(max_header_bytes=10_000, max_steps=10, max_images=6)


def test_a_chunk_round_trips_with_its_images_in_order():
    steps = [{"index": 4, "action": [1, 2.5], "reward": 1, "success": True, "info": {"a": [1]}}, {"index": 5}]
    images = [{"main": b"first", "extra": b"22"}, {"main": b"333"}]
    decoded = decode_chunk(encode_chunk(steps, images), LIMITS)
    assert [s.index for s in decoded] == [4, 5]
    assert decoded[0].action == [1.0, 2.5] and decoded[0].reward == 1.0 and decoded[0].success is True
    assert decoded[0].info == {"a": [1]} and decoded[1].terminated is False and decoded[1].score is None
    assert {c: bytes(v) for c, v in decoded[0].images.items()} == {"main": b"first", "extra": b"22"}
    assert list(decoded[0].images) == ["main", "extra"] and bytes(decoded[1].images["main"]) == b"333"


def test_limits_are_checked_before_any_image_is_sliced():
    with pytest.raises(ChunkTooLarge, match="11 steps in one chunk; the limit is 10"):
        decode_chunk(encode_chunk([{"index": i} for i in range(11)], [{}] * 11), LIMITS)
    with pytest.raises(ChunkTooLarge, match="7 images in one chunk"):
        decode_chunk(encode_chunk([{"index": 0}], [{str(c): b"x" for c in range(7)}]), LIMITS)
    with pytest.raises(ChunkTooLarge, match="chunk header of"):
        decode_chunk(encode_chunk([{"index": 0, "info": {"x": "y" * 20_000}}], [{}]), LIMITS)


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"index": True}, "index must be an integer"),
        ({"index": 2**31}, "index must be an integer"),
        ({"index": 0, "action": "fast"}, "action must be a list"),
        ({"index": 0, "action": [1, "x"]}, "action must be a finite number"),
        ({"index": 0, "action": [1.0, True]}, "action must be a finite number"),
        ({"index": 0, "action": [10**400]}, "action must be a finite number"),  # no float holds it
        ({"index": 0, "reward": 10**400}, "reward must be a finite number"),
        ({"index": 0, "score": "high"}, "score must be a finite number"),
        ({"index": 0, "info": [1]}, "info must be an object"),
        ({"index": 0, "images": {"main": 0}}, "byte length must be a positive integer"),
        ({"index": 0, "images": {"": 3}}, "camera names are 1 to 100 characters"),
    ],
)
def test_bad_step_fields_are_named(step, message):
    from robot_agent.chunk_format import MAGIC, PREFIX

    header = __import__("json").dumps({"steps": [step]}).encode()
    with pytest.raises(ChunkError, match=message):
        decode_chunk(PREFIX.pack(MAGIC, len(header)) + header, LIMITS)
