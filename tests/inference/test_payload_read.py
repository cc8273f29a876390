"""The worker's payload reader (`inference/workers/payload_read.py`): MGET read straight into bytearrays, on real
Redis; what it returns is what was stored, and the pooled connection stays usable after it."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

from common.redis_clients import redis_from_url
from inference.broker import dump_npy, load_npy
from inference.workers.payload_read import payloads_get

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/5")


@pytest.fixture
def redis():
    client = redis_from_url(URL)
    prefix = f"rs:test:payload:{uuid.uuid4().hex}:"
    yield client, prefix
    client.delete(*[prefix + name for name in ("big", "small", "empty")])


def test_stored_payloads_come_back_whole_writable_and_in_order(redis):
    client, prefix = redis
    frames = np.random.default_rng(1).integers(0, 256, size=(40, 128, 128, 3), dtype=np.uint8)  # 2 MB
    big, small = dump_npy(frames), b"\r\n$5\r\n*1\r\n"  # protocol-like bytes inside a value are data
    client.set(prefix + "big", big)
    client.set(prefix + "small", small)
    client.set(prefix + "empty", b"")
    got = payloads_get(client, [prefix + "big", prefix + "missing", prefix + "small", prefix + "empty"])
    assert got == [bytearray(big), None, bytearray(small), bytearray()]
    array = load_npy(got[0])
    assert array.flags.writeable and np.shares_memory(array, np.frombuffer(got[0], np.uint8))
    np.testing.assert_array_equal(array, frames)
    assert client.get(prefix + "small") == small  # the pooled connection answers the next command
    assert payloads_get(client, []) == []
