"""TeleopStream without a socket: a plain outlet object in place of the consumer, real PostgreSQL (through
the stream's database threads), Redis and, for scoring, a real inference worker."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import numpy as np
import pytest
from django.db import OperationalError

from common import metrics
from inference.teleop import services
from inference.teleop.models import TeleopSession
from inference.teleop.stream import CLOSE_TRY_AGAIN, FLUSH_EVERY, TeleopStream, group_name
from labeling.models import Episode, Step
from robot_agent.protocol import decode_image, unpack_step

from .test_consumers import HELLO, step_message

pytestmark = pytest.mark.django_db(transaction=True)


class Outlet:
    """What the consumer would send: replies to the agent, events to the viewers' group, closes."""

    def __init__(self) -> None:
        self.replies: list[dict] = []
        self.published: list[tuple[str, dict]] = []
        self.closed: list[int] = []

    async def reply(self, data: dict) -> None:
        self.replies.append(data)

    async def publish(self, group: str, data: dict) -> None:
        self.published.append((group, data))

    async def close(self, code: int) -> None:
        self.closed.append(code)

    def of_type(self, kind: str) -> list[dict]:
        return [r for r in self.replies if r["type"] == kind]


@pytest.fixture(autouse=True)
def no_proposal_jobs(monkeypatch):
    """An episode's end queues its proposals for Celery; recorded here instead (see test_bounds)."""
    queued: list[int] = []
    monkeypatch.setattr("labeling.ingest.services._queue_proposals", queued.append)
    return queued


async def _results(outlet: Outlet, n: int, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(outlet.of_type("result")) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return outlet.of_type("result")


def test_a_stream_records_its_episode_publishes_its_frames_and_ends_on_bye(project, agent_token, no_proposal_jobs):
    agent = agent_token[0]
    episode = str(uuid.uuid4())
    steps = FLUSH_EVERY + 2  # one flush during the stream, the rest at the episode's end

    async def scenario():
        outlet = Outlet()
        stream = TeleopStream(agent, outlet)
        stream.start()
        await stream.on_text(json.dumps(HELLO))
        await stream.on_text(json.dumps({"type": "episode_start", "episode": episode}))
        for index in range(steps):
            await stream.on_step(step_message(episode, index, success=index == steps - 1))
        await stream.on_text(json.dumps({"type": "episode_end", "episode": episode, "success": True}))
        await stream.on_text(json.dumps({"type": "bye"}))
        await stream.stop()
        return outlet, stream

    outlet, stream = asyncio.run(scenario())
    session_id = outlet.replies[0]["session"]
    assert outlet.replies[0] == {"type": "session", "session": session_id, "dashboard": f"/teleop/{session_id}/"}
    assert outlet.closed == [1000] and outlet.of_type("warning") == []
    assert {group for group, _ in outlet.published} == {group_name(session_id)}
    events = [data for _, data in outlet.published]
    assert [e["index"] for e in events if e["type"] == "frame"] == list(range(steps))
    assert [e["event"] for e in events if e["type"] == "episode"] == ["start", "end"]
    assert events[-1]["type"] == "status" and events[-1]["live"] is False and events[-1]["steps"] == steps
    session = TeleopSession.objects.get(pk=session_id)
    assert not session.is_live and session.ended_at is not None and session.step_count == steps
    recorded = Episode.objects.get(uuid=episode)
    assert recorded.success is True and recorded.num_steps == steps
    assert sorted(Step.objects.filter(episode=recorded).values_list("index", flat=True)) == list(range(steps))
    assert no_proposal_jobs == [recorded.pk]
    assert stream.tasks == set()


def test_stop_closes_the_session_and_every_task_when_its_end_fails(project, agent_token, monkeypatch):
    def fails(**_):
        raise RuntimeError("database gone")

    monkeypatch.setattr(services, "teleop_steps_record", fails)
    monkeypatch.setattr(services, "session_update_stats", fails)
    episode = str(uuid.uuid4())

    async def scenario():
        outlet = Outlet()
        stream = TeleopStream(agent_token[0], outlet)
        stream.start()
        await stream.on_text(json.dumps(HELLO))
        await stream.on_text(json.dumps({"type": "episode_start", "episode": episode}))
        for index in range(3):
            await stream.on_step(step_message(episode, index))
        running = len(stream.tasks)
        await stream.stop()
        await stream.stop()  # a second stop (the socket's disconnect after a close) does nothing
        return outlet, stream, running

    streams = metrics.teleop_streams._value.get()
    outlet, stream, running = asyncio.run(scenario())
    assert metrics.teleop_streams._value.get() == streams  # counted once, uncounted once
    assert running == 2  # the token watcher and the status ticker
    assert stream.tasks == set()
    warnings = [w["message"] for w in outlet.of_type("warning")]
    assert warnings == ["recording of 3 steps failed on the server (see its log)"]
    assert not TeleopSession.objects.get().is_live


def test_bad_messages_are_warnings_and_a_second_hello_is_refused(project, agent_token):
    async def scenario():
        outlet = Outlet()
        stream = TeleopStream(agent_token[0], outlet)
        await stream.on_step(step_message(str(uuid.uuid4()), 0))  # before hello
        await stream.on_text(json.dumps({"type": "episode_start"}))  # before hello
        await stream.on_text(json.dumps(HELLO))
        await stream.on_text(json.dumps(HELLO))
        await stream.on_text("[1, 2")
        await stream.on_text(json.dumps({"type": "dance"}))
        await stream.on_step(b"\x00\x00")
        await stream.stop()
        return outlet

    streams = metrics.teleop_streams._value.get()
    outlet = asyncio.run(scenario())
    assert metrics.teleop_streams._value.get() == streams  # never started: never counted
    warnings = [w["message"] for w in outlet.of_type("warning")]
    assert len(outlet.of_type("session")) == 1 and len(warnings) == 6, warnings
    expected = ("say hello before sending steps", "say hello first", "one hello per socket", "must be JSON objects")
    for warning, text in zip(warnings, (*expected, "unknown message type 'dance'", "step skipped"), strict=True):
        assert text in warning
    assert TeleopSession.objects.count() == 1 and not TeleopSession.objects.get().is_live


@pytest.mark.usefixtures("inference_worker_process")
def test_scored_frames_take_the_rest_reward_path_to_the_gallery_and_the_monitor(project, agent_token):
    from inference import gallery
    from inference.models import ServedFrame
    from inference.monitor import services as monitor_store
    from inference.monitor.selectors import monitor_data

    from ..conftest import deploy, direct_probabilities, make_trained_model

    agent = agent_token[0]
    model = make_trained_model(project, seed=3)
    # the terminal mode would leave steps without `done` unscored over REST; a live frame is always scored
    deployment = deploy(
        model, sample_every=1, reward_mode="terminal", reward_type="soft", env_reward_weight=1.0, threshold=0.5
    )
    episode = str(uuid.uuid4())
    messages = [step_message(episode, index) for index in range(3)]

    async def scenario():
        outlet = Outlet()
        stream = TeleopStream(agent, outlet)
        stream.start()
        await stream.on_text(json.dumps({**HELLO, "deployment": deployment.name}))
        await stream.on_text(json.dumps({"type": "episode_start", "episode": episode}))
        for n, message in enumerate(messages, 1):  # one at a time: none is replaced in the slot
            await stream.on_step(message)
            await _results(outlet, n)
        await stream.stop()
        return outlet

    outlet = asyncio.run(scenario())
    results = outlet.of_type("result")
    assert [r["index"] for r in results] == [0, 1, 2], outlet.replies
    frames = [decode_image(unpack_step(message)[1]["main"]) for message in messages]
    expected = direct_probabilities(model.checkpoint_path, np.stack(frames))
    for result, probability, index in zip(results, expected, range(3), strict=True):
        assert result["probability"] == pytest.approx(float(probability), abs=1e-5)
        assert result["reward"] == pytest.approx(0.1 * index + result["probability"], abs=1e-6)  # soft + env
        assert result["success"] == (result["probability"] > 0.5)
    gallery.wait_for_writes()
    monitor_store.monitor_flush()
    session_id = outlet.of_type("session")[0]["session"]
    run = f"a{agent.pk}/teleop-{session_id}"
    sampled = ServedFrame.objects.filter(deployment=deployment, env_success__isnull=True)  # the gallery's
    assert sorted(sampled.values_list("probability", flat=True)) == pytest.approx(
        sorted(r["probability"] for r in results), abs=1e-6
    )
    # the monitor kept the frames where the model said success and the env (every step_message) did not
    kept = ServedFrame.objects.filter(deployment=deployment, run=run)
    assert set(kept.values_list("env_success", "episode_ref").distinct()) <= {(False, episode)}
    assert sorted(kept.values_list("probability", flat=True)) == pytest.approx(
        sorted(r["probability"] for r in results if r["success"]), abs=1e-6
    )
    series = monitor_data(deployment)["series"]
    assert sum(series["served_histogram"]) == 3 and run in series["runs"]


def test_a_hello_the_database_could_not_answer_closes_for_a_retry_and_a_second_hello_opens(
    project, agent_token, monkeypatch
):
    real_open = services.session_open
    failures = [OperationalError("the server closed the connection")]

    def session_open(**kwargs):
        if failures:
            raise failures.pop()
        return real_open(**kwargs)

    monkeypatch.setattr(services, "session_open", session_open)

    async def scenario():
        outlet = Outlet()
        stream = TeleopStream(agent_token[0], outlet)
        stream.start()
        await stream.on_text(json.dumps(HELLO))
        closed_after_failure = list(outlet.closed)
        await stream.on_text(json.dumps(HELLO))  # the agent's reconnect says hello again
        await stream.stop()
        return outlet, closed_after_failure

    outlet, closed_after_failure = asyncio.run(scenario())
    assert closed_after_failure == [CLOSE_TRY_AGAIN]  # not a fatal close: the agent reconnects
    assert not outlet.of_type("error") and len(outlet.of_type("session")) == 1
