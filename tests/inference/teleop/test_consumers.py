"""Teleop consumers over Channels' WebsocketCommunicator on the real Redis channel layer and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import uuid

import numpy as np
import pytest
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from inference.teleop.models import TeleopSession
from inference.teleop.routing import websocket_urlpatterns
from labeling.models import Episode, FrameLabel, LabelChange
from projects.auth import AgentTokenMiddleware
from robot_agent.protocol import encode_image, pack_step

pytestmark = pytest.mark.django_db(transaction=True)

APP = AuthMiddlewareStack(AgentTokenMiddleware(URLRouter(websocket_urlpatterns)))
HELLO = {"type": "hello", "project": "PickCube", "cameras": ["main", "extra"], "hz": 10, "policy": "scripted"}


def agent_communicator(token: str | None) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return WebsocketCommunicator(APP, "/ws/teleop/agent/", headers=headers)


def viewer_communicator(session_id: int, cookie: str | None) -> WebsocketCommunicator:
    headers = [(b"cookie", f"sessionid={cookie}".encode())] if cookie else []
    return WebsocketCommunicator(APP, f"/ws/teleop/sessions/{session_id}/", headers=headers)


def step_message(episode: str, index: int, success: bool = False) -> bytes:
    frame = np.full((32, 32, 3), 40 + index, np.uint8)
    images = {"main": encode_image(frame), "extra": encode_image(frame[:, ::-1])}
    header = {
        "episode": episode,
        "index": index,
        "action": [0.1] * 7 if index else [],
        "reward": 0.1 * index,
        "success": success,
        "sent_at": 0.0,
    }
    return pack_step(header, images)


async def receive_until(communicator, kind: str, timeout: float = 5.0) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        message = json.loads(
            await communicator.receive_from(timeout=max(0.05, deadline - asyncio.get_running_loop().time()))
        )
        if message["type"] == kind:
            return message


@pytest.fixture(autouse=True)
def close_consumer_connections():
    """Consumers query from a worker thread; close its connection so the test database can be dropped."""
    yield
    from channels.db import database_sync_to_async
    from django.db import connections

    asyncio.run(database_sync_to_async(connections.close_all)())


@pytest.fixture
def viewer_cookie(user_client):
    return user_client.cookies["sessionid"].value


def test_agent_without_a_token_is_refused(project):
    async def scenario():
        communicator = agent_communicator(None)
        connected, code = await communicator.connect()
        return connected, code

    assert asyncio.run(scenario()) == (False, 4401)


def test_agent_with_an_unknown_token_is_refused(project):
    async def scenario():
        return await agent_communicator("not-a-real-token").connect()

    assert asyncio.run(scenario()) == (False, 4401)


def test_hello_for_an_unknown_project_gets_an_error_and_a_close(agent_token):
    async def scenario():
        communicator = agent_communicator(agent_token[1])
        assert (await communicator.connect())[0]
        await communicator.send_to(text_data=json.dumps(dict(HELLO, project="Nope")))
        reply = json.loads(await communicator.receive_from(timeout=5))
        closed = await communicator.receive_output(timeout=5)
        return reply, closed

    reply, closed = asyncio.run(scenario())
    assert reply == {"type": "error", "message": "no project named 'Nope'"}
    assert closed == {"type": "websocket.close", "code": 4400}


def test_viewers_must_be_logged_in_and_the_session_must_exist(project, agent_token, viewer_cookie):
    session = TeleopSession.objects.create(agent=agent_token[0], project=project)

    async def scenario():
        anonymous = await viewer_communicator(session.pk, None).connect()
        missing = await viewer_communicator(session.pk + 999, viewer_cookie).connect()
        return anonymous, missing

    anonymous, missing = asyncio.run(scenario())
    assert anonymous == (False, 4401)
    assert missing == (False, 4404)


def test_a_stream_reaches_every_viewer_and_is_recorded_with_operator_labels(project, agent_token, viewer_cookie):
    agent, token = agent_token
    episode = str(uuid.uuid4())

    async def scenario():
        robot = agent_communicator(token)
        assert (await robot.connect())[0]
        await robot.send_to(text_data=json.dumps(HELLO))
        hello = json.loads(await robot.receive_from(timeout=5))
        viewers = [viewer_communicator(hello["session"], viewer_cookie) for _ in range(2)]
        snapshots = []
        for viewer in viewers:
            assert (await viewer.connect())[0]
            snapshots.append(await receive_until(viewer, "snapshot"))
        await robot.send_to(text_data=json.dumps({"type": "episode_start", "episode": episode, "seed": 3}))
        for index in range(3):
            await robot.send_to(bytes_data=step_message(episode, index, success=index == 2))
        await robot.send_to(text_data=json.dumps({"type": "label", "episode": episode, "index": 2, "value": "success"}))
        await robot.send_to(text_data=json.dumps({"type": "label", "episode": episode, "index": 0, "value": "fail"}))
        await robot.send_to(text_data=json.dumps({"type": "episode_end", "episode": episode, "success": True}))
        seen = []
        for viewer in viewers:
            start = await receive_until(viewer, "episode")
            frames = [await receive_until(viewer, "frame") for _ in range(3)]
            label = await receive_until(viewer, "label")
            end = await receive_until(viewer, "episode")
            seen.append((start, frames, label, end))
        await robot.send_to(text_data=json.dumps({"type": "bye"}))
        assert (await robot.receive_output(timeout=5))["type"] == "websocket.close"
        await robot.disconnect()
        for viewer in viewers:
            await viewer.disconnect()
        return hello, snapshots, seen

    hello, snapshots, seen = asyncio.run(scenario())
    assert hello["type"] == "session" and hello["dashboard"] == f"/teleop/{hello['session']}/"
    assert snapshots[0]["project"] == "PickCube" and snapshots[0]["cameras"] == ["main", "extra"]
    for start, frames, label, end in seen:
        assert start["event"] == "start" and start["episode"] == episode
        assert [f["index"] for f in frames] == [0, 1, 2]
        assert frames[2]["success"] is True
        assert frames[0]["images"]["main"].startswith("data:image/jpeg;base64,")
        assert set(frames[0]["images"]) == {"main", "extra"}
        assert label == {"type": "label", "episode": episode, "index": 2, "value": "success"}
        assert end["event"] == "end" and end["success"] is True and end["steps"] == 3

    stored = Episode.objects.get(uuid=episode)
    assert stored.agent == agent and stored.status == Episode.Status.FINISHED and stored.success is True
    assert stored.metadata["teleop_session"] == hello["session"] and stored.metadata["seed"] == 3
    steps = list(stored.steps.order_by("index"))
    assert [s.index for s in steps] == [0, 1, 2]
    assert steps[1].action == pytest.approx([0.1] * 7) and steps[2].env_success
    assert all(s.frames.count() == 2 for s in steps)
    # the finished episode may also get proposals (another source) from a worker; the operator's are human
    labels = {label.step.index: label for label in FrameLabel.objects.filter(episode=stored, source="human")}
    assert set(labels) == {0, 2} and labels[2].value == "success" and labels[0].value == "fail"
    assert all(label.agent == agent and label.author is None for label in labels.values())
    assert LabelChange.objects.filter(episode=stored, agent=agent).count() == 2
    session = TeleopSession.objects.get(pk=hello["session"])
    assert not session.is_live and session.ended_at is not None
    assert session.step_count == 3 and session.label_count == 2
    assert list(session.episodes.all()) == [stored]


def test_a_reconnecting_agent_resumes_its_session(project, agent_token):
    token = agent_token[1]

    async def scenario():
        first = agent_communicator(token)
        await first.connect()
        await first.send_to(text_data=json.dumps(HELLO))
        session = json.loads(await first.receive_from(timeout=5))["session"]
        await first.disconnect()
        second = agent_communicator(token)
        await second.connect()
        await second.send_to(text_data=json.dumps(dict(HELLO, session=session)))
        resumed = json.loads(await second.receive_from(timeout=5))["session"]
        await second.disconnect()
        return session, resumed

    session, resumed = asyncio.run(scenario())
    assert session == resumed
    assert TeleopSession.objects.count() == 1


def test_bad_input_gets_a_warning_not_a_crash(project, agent_token):
    async def scenario():
        robot = agent_communicator(agent_token[1])
        await robot.connect()
        await robot.send_to(bytes_data=b"\x00\x00\x00\x02{}")
        before_hello = json.loads(await robot.receive_from(timeout=5))
        await robot.send_to(text_data=json.dumps(dict(HELLO, deployment="no-such-model")))
        await receive_until(robot, "session")
        await robot.send_to(bytes_data=b"\x00\x00\x00\x02{}")
        malformed = await receive_until(robot, "warning")
        await robot.send_to(text_data="not json")
        not_json = await receive_until(robot, "warning")
        episode = str(uuid.uuid4())
        await robot.send_to(text_data=json.dumps({"type": "episode_start", "episode": episode}))
        await robot.send_to(bytes_data=step_message(episode, 0))
        no_model = await receive_until(robot, "warning")
        await robot.disconnect()
        return before_hello, malformed, not_json, no_model

    before_hello, malformed, not_json, no_model = asyncio.run(scenario())
    assert before_hello["message"] == "say hello before sending steps"
    assert "must be steps" in malformed["message"]
    assert "JSON" in not_json["message"]
    assert no_model["message"] == "no deployment named 'no-such-model'"
