"""The binary step message both sides speak."""

import numpy as np
import pytest

from robot_agent.protocol import ProtocolError, decode_image, encode_image, pack_step, unpack_step
from robot_agent.streamer import websocket_url


def test_a_step_round_trips_with_every_camera():
    main = np.zeros((32, 48, 3), np.uint8)
    main[..., 0] = 200
    extra = np.full((16, 16, 3), 77, np.uint8)
    images = {"main": encode_image(main, "png"), "extra": encode_image(extra, "png")}
    message = pack_step({"episode": "e1", "index": 3, "reward": 0.5, "success": True}, images, "png")
    header, got = unpack_step(message)
    assert header["index"] == 3 and header["success"] is True and header["type"] == "step"
    assert set(got) == {"main", "extra"}
    assert np.array_equal(decode_image(got["main"]), main)
    assert decode_image(got["extra"]).shape == (16, 16, 3)


def test_jpeg_frames_decode_close_to_the_original():
    frame = np.full((64, 64, 3), 120, np.uint8)
    assert np.abs(decode_image(encode_image(frame, "jpeg")).astype(int) - 120).max() <= 3


@pytest.mark.parametrize(
    "message, error",
    [
        (b"\x00\x00", "shorter"),
        (b"\x00\x00\x10\x00{}", "exceeds"),
        (b"\x00\x00\x00\x02{}", "must be steps"),
        (b"\x00\x00\x00\x0fnot json at all", "not JSON"),
    ],
)
def test_malformed_messages_are_refused_with_a_reason(message, error):
    with pytest.raises(ProtocolError, match=error):
        unpack_step(message)


def test_an_image_running_past_the_end_is_refused():
    message = pack_step({"episode": "e", "index": 0}, {"main": b"12345"})
    with pytest.raises(ProtocolError, match="past the end"):
        unpack_step(message[:-2])


def test_websocket_url_follows_the_http_scheme():
    assert websocket_url("http://127.0.0.1:8000") == "ws://127.0.0.1:8000/ws/teleop/agent/"
    assert websocket_url("https://studio.example.org/") == "wss://studio.example.org/ws/teleop/agent/"
