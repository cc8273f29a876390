"""The web side of VLM serving: concurrent streams' windows travel to the workers as one request."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from inference.broker import load_npy
from inference.rewards import RewardSettings
from inference.serving import DeploymentConfig
from inference.vlm import serving
from training.vlm.wire import WindowRequest, WireError, unpack_window

CONFIG = DeploymentConfig(
    id=1,
    name="vlm-d",
    version=1,
    status="healthy",
    error="",
    kind="vlm",
    project_id=None,
    reward=RewardSettings(),
    max_batch_size=8,
    max_wait_ms=5.0,
    sample_every=0,
)


@pytest.fixture
def broker_requests(monkeypatch):
    """Stands in for the broker: records each request's windows, answers each window with its first pixel."""
    sent: list[list[int]] = []

    async def infer_payload(config, payload, *, timeout=None):
        firsts = [int(unpack_window(row).images[0][0, 0, 0]) for row in load_npy(payload)]
        sent.append(firsts)
        return [{"first": first} for first in firsts]

    monkeypatch.setattr(serving, "infer_payload", infer_payload)
    return sent


def window(value: int) -> WindowRequest:
    return WindowRequest([np.full((4, 4, 3), value, np.uint8) for _ in range(2)], "prompt")


def test_concurrent_streams_share_one_request_and_get_their_own_results(broker_requests):
    async def streams():
        return await asyncio.gather(*(serving.windows_infer(CONFIG, [window(v)]) for v in range(8)))

    results = asyncio.run(streams())
    assert [r[0]["first"] for r in results] == list(range(8))
    assert broker_requests == [list(range(8))]


def test_a_lone_stream_sends_its_windows_at_once(broker_requests):
    assert asyncio.run(serving.windows_infer(CONFIG, [window(3), window(4)])) == [{"first": 3}, {"first": 4}]
    assert asyncio.run(serving.windows_infer(CONFIG, [])) == []
    assert broker_requests == [[3, 4]]


def test_a_malformed_window_fails_only_its_own_caller(broker_requests):
    bad = WindowRequest([np.zeros((4, 4), np.uint8)], "prompt")

    async def streams():
        return await asyncio.gather(
            serving.windows_infer(CONFIG, [bad]), serving.windows_infer(CONFIG, [window(7)]), return_exceptions=True
        )

    failed, good = asyncio.run(streams())
    assert isinstance(failed, WireError)
    assert good == [{"first": 7}]
    assert broker_requests == [[7]]
