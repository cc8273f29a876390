"""A live stream's steps are recorded between frames, not while a frame is being scored."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from inference.teleop import stream
from inference.teleop.stream import FLUSH_EVERY, FLUSH_LIMIT, record_now

from .test_consumers import HELLO, agent_communicator, close_consumer_connections, step_message  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def test_record_now_waits_for_the_frame_being_scored_up_to_the_limit():
    assert not record_now(FLUSH_EVERY - 1, scoring=False)
    assert record_now(FLUSH_EVERY, scoring=False)
    assert not record_now(FLUSH_EVERY, scoring=True)
    assert not record_now(FLUSH_LIMIT - 1, scoring=True)
    assert record_now(FLUSH_LIMIT, scoring=True)


def test_steps_buffered_during_a_frames_scoring_are_recorded_after_its_result(project, agent_token, monkeypatch):
    from inference.teleop import scoring, services

    _, token = agent_token
    episode = str(uuid.uuid4())
    recorded: list[int] = []
    real_record = services.teleop_steps_record

    def record(*, session_id, steps):
        recorded.append(len(steps))
        return real_record(session_id=session_id, steps=steps)

    monkeypatch.setattr(services, "teleop_steps_record", record)
    monkeypatch.setattr(stream, "TICK_S", 60.0)  # only the flushes under test
    release = asyncio.Event()

    async def slow_score(deployment, image, env_reward=0.0, timeout=10.0, **_):
        await release.wait()
        return scoring.FrameScore(0.5, False, 0.0, 0.5, 1.0)

    monkeypatch.setattr(scoring, "score_frame", slow_score)

    async def scenario():
        robot = agent_communicator(token)
        assert (await robot.connect())[0]
        await robot.send_to(text_data=json.dumps({**HELLO, "deployment": "any-model"}))
        json.loads(await robot.receive_from(timeout=5))
        await robot.send_to(text_data=json.dumps({"type": "episode_start", "episode": episode}))
        for index in range(FLUSH_EVERY):
            await robot.send_to(bytes_data=step_message(episode, index))
        await asyncio.sleep(0.5)  # every step received; the first frame is still being scored
        before = list(recorded)
        release.set()
        results = []
        while len(results) < 2:  # the first frame, then the newest one that waited in the slot
            message = json.loads(await robot.receive_from(timeout=5))
            if message["type"] == "result":
                results.append(message["index"])
        for _ in range(50):
            if recorded:
                break
            await asyncio.sleep(0.05)
        await robot.send_to(text_data=json.dumps({"type": "bye"}))
        await robot.receive_output(timeout=5)
        await robot.disconnect()
        return before, results

    before, results = asyncio.run(scenario())
    assert before == []
    assert results == [0, FLUSH_EVERY - 1]
    assert recorded[0] == FLUSH_EVERY
