"""Newest-frame-wins scheduling: one in flight, one waiting, the rest counted as dropped."""

import asyncio

from inference.teleop.latest import LatestFrameSlot


def test_backlog_stays_at_one_and_the_newest_frame_is_scored():
    async def scenario():
        scored = []
        release = asyncio.Event()

        async def slow_inference(frame):
            await release.wait()
            scored.append(frame)

        slot = LatestFrameSlot(slow_inference)
        for frame in range(10):
            slot.submit(frame)
            assert slot.backlog <= 2
            await asyncio.sleep(0)
        release.set()
        while slot.busy:
            await asyncio.sleep(0.001)
        return scored, slot

    scored, slot = asyncio.run(scenario())
    assert scored == [0, 9]  # the first (already running) and the newest; 1..8 were replaced
    assert slot.dropped == 8
    assert slot.completed == 2 and slot.submitted == 10


def test_a_failing_inference_does_not_stop_the_stream():
    async def scenario():
        seen = []

        async def flaky(frame):
            seen.append(frame)
            if frame == 0:
                raise RuntimeError("model hiccup")

        slot = LatestFrameSlot(flaky)
        slot.submit(0)
        await asyncio.sleep(0.01)
        slot.submit(1)
        await asyncio.sleep(0.01)
        return seen, slot

    seen, slot = asyncio.run(scenario())
    assert seen == [0, 1] and not slot.busy and slot.dropped == 0
