"""Malformed teleop messages are warnings, never a dead consumer: each bad value is named back to the agent,
the stream goes on (a good step after them is recorded), and when the socket closes its tasks are gone and
the session is not live. A handler that fails on the server side ends the socket through its cleanup
(common.ws_guard), sessions a dead process left live are closed at the next hello, and scoring needs the
token's rewards scope. Real Redis channel layer and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import struct
import uuid
from datetime import timedelta

import pytest
from channels.layers import get_channel_layer
from django.utils import timezone

from inference.teleop.consumers import group_name
from inference.teleop.models import TeleopSession
from labeling.models import Step

from .test_bounds import _socket_tasks
from .test_consumers import (  # noqa: F401 - the autouse fixture closes consumer connections
    HELLO,
    agent_communicator,
    close_consumer_connections,
    receive_until,
    step_message,
    viewer_communicator,
    viewer_cookie,
)

pytestmark = pytest.mark.django_db(transaction=True)

DEEP = "[" * 5000 + "]" * 5000


def binary_step(header: dict) -> bytes:
    head = json.dumps(dict(header, type="step")).encode()
    return struct.pack(">I", len(head)) + head


def bad_messages(episode: str) -> list[tuple[dict, str | None]]:
    """(the message as send_to's keywords, words of the warning it must get)."""
    step = {"episode": episode, "index": 5}
    return [
        ({"text_data": DEEP}, "JSON_MAX_DEPTH"),
        ({"text_data": json.dumps({"type": "hello", "x": "y" * 70_000})}, "at most 65536 characters"),
        ({"text_data": '"just a string"'}, "JSON objects with a 'type'"),
        ({"text_data": json.dumps({"type": ["hello"]})}, "JSON objects with a 'type'"),
        (
            {"text_data": json.dumps({"type": "label", "episode": episode, "index": 10**30, "value": "success"})},
            "index",
        ),
        ({"text_data": json.dumps({"type": "label", "episode": "nope", "index": 1, "value": "success"})}, "UUID"),
        ({"text_data": json.dumps({"type": "episode_start", "episode": {"a": 1}})}, "is not a UUID"),
        (  # JSON with NaN, as Python's json writes it: a warning naming the field, not a logged server error
            {"text_data": json.dumps({"type": "episode_start", "episode": str(uuid.uuid4()), "seed": float("nan")})},
            "seed and policy must be JSON values without NaN or Infinity",
        ),
        ({"bytes_data": struct.pack(">I", len(DEEP)) + DEEP.encode()}, "step header nests 5000 levels"),
        ({"bytes_data": binary_step(dict(step, reward="lots"))}, "reward must be a finite number"),
        ({"bytes_data": binary_step(dict(step, index=6, reward=10**400))}, "reward must be a finite number"),
        ({"bytes_data": binary_step(dict(step, sent_at=2**70))}, None),  # finite as a float: allowed
        ({"bytes_data": binary_step(dict(step, episode="not-a-uuid"))}, "episode must be a UUID"),
        ({"bytes_data": binary_step(dict(step, index=2**40))}, "step index must be an integer"),
        ({"bytes_data": binary_step(dict(step, action="abc"))}, "action must be a list"),
        ({"bytes_data": binary_step(dict(step, action=[1, "x"]))}, "action must be a finite number"),
        ({"bytes_data": binary_step(dict(step, info=[1]))}, "info must be an object"),
        ({"bytes_data": binary_step(dict(step, info={"x": "y" * 70_000}))}, "JSON_FIELD_MAX_BYTES"),
        ({"bytes_data": binary_step(dict(step, success="yes"))}, "success must be true or false"),
    ]


def test_bad_values_are_warnings_and_the_stream_goes_on(project, agent_token):
    episode = str(uuid.uuid4())

    async def scenario():
        robot = agent_communicator(agent_token[1])
        assert (await robot.connect())[0]
        await robot.send_to(text_data=json.dumps(HELLO))
        session = await receive_until(robot, "session")
        await robot.send_to(text_data=json.dumps({"type": "episode_start", "episode": episode}))
        warnings = []
        for message, words in bad_messages(episode):
            await robot.send_to(**message)
            if words is not None:
                warnings.append((words, (await receive_until(robot, "warning"))["message"]))
        await robot.send_to(bytes_data=step_message(episode, 0))
        await robot.send_to(text_data=json.dumps({"type": "bye"}))
        closed = await robot.receive_output(timeout=10)
        while closed.get("type") != "websocket.close":
            closed = await robot.receive_output(timeout=10)
        await robot.disconnect(timeout=10)  # the client's side of the close
        await asyncio.sleep(0.1)
        return session["session"], warnings, closed, _socket_tasks()

    session_id, warnings, closed, tasks = asyncio.run(scenario())
    for words, message in warnings:
        assert words in message, (words, message)
    assert closed["code"] == 1000 and tasks == []
    # the good steps among and after them were recorded (5: a sent_at past 64 bits, broadcast as a float)
    assert sorted(Step.objects.values_list("index", flat=True)) == [0, 5]
    assert not TeleopSession.objects.get(pk=session_id).is_live


@pytest.mark.parametrize(
    "hello",
    [{"session": "abc"}, {"session": 10**30}, {"cameras": 5}, {"cameras": [{"a": 1}]}, {"hz": "fast"}, {"hz": 1e400}],
)
def test_a_bad_hello_is_refused_with_an_error_naming_the_field(project, agent_token, hello):
    async def scenario():
        robot = agent_communicator(agent_token[1])
        assert (await robot.connect())[0]
        await robot.send_to(text_data=json.dumps(dict(HELLO, **hello)))
        reply = json.loads(await robot.receive_from(timeout=5))
        closed = await robot.receive_output(timeout=5)
        return reply, closed

    reply, closed = asyncio.run(scenario())
    assert reply["type"] == "error" and next(iter(hello)) in reply["message"]
    assert closed == {"type": "websocket.close", "code": 4400}
    assert not TeleopSession.objects.exists()


def test_a_handler_that_fails_ends_the_socket_through_its_cleanup(project, agent_token, viewer_cookie):  # noqa: F811
    async def scenario():
        robot = agent_communicator(agent_token[1])
        assert (await robot.connect())[0]
        await robot.send_to(text_data=json.dumps(HELLO))
        session = (await receive_until(robot, "session"))["session"]
        viewer = viewer_communicator(session, viewer_cookie)
        assert (await viewer.connect())[0]
        await receive_until(viewer, "snapshot")
        await viewer.send_to(text_data=DEEP)  # viewers' messages are not even parsed
        # an event no handler takes: channels raises in the viewer's consumer, which must close cleanly
        await get_channel_layer().group_send(group_name(session), {"type": "teleop.nothing"})
        closed = await viewer.receive_output(timeout=5)
        while closed.get("type") != "websocket.close":
            closed = await viewer.receive_output(timeout=5)
        await robot.disconnect(timeout=10)
        await asyncio.sleep(0.1)
        return session, closed, _socket_tasks()

    session, closed, tasks = asyncio.run(scenario())
    assert closed == {"type": "websocket.close", "code": 1011}
    assert tasks == [] and not TeleopSession.objects.get(pk=session).is_live


def test_sessions_left_live_by_a_dead_process_are_closed_at_the_next_hello(project, agent_token):
    agent = agent_token[0]
    silent = timezone.now() - timedelta(minutes=5)
    stale = TeleopSession.objects.create(agent=agent, project=project, is_live=True, last_seen_at=silent)
    recent = TeleopSession.objects.create(agent=agent, project=project, is_live=True, last_seen_at=timezone.now())

    async def scenario():
        robot = agent_communicator(agent_token[1])
        assert (await robot.connect())[0]
        await robot.send_to(text_data=json.dumps(HELLO))
        await receive_until(robot, "session")
        await robot.disconnect(timeout=10)

    asyncio.run(scenario())
    stale.refresh_from_db()
    recent.refresh_from_db()
    assert not stale.is_live and stale.ended_at is not None
    assert recent.is_live  # heard from within TELEOP_STALE_AFTER_S: another process's live socket


def test_scoring_frames_needs_the_rewards_scope(project, scoped_agent_client):
    from projects.services import agent_create

    _, token = agent_create(name="teleop-only", kind="robot", scopes=["teleop"], projects=[project])

    async def scenario():
        robot = agent_communicator(token)
        assert (await robot.connect())[0]
        await robot.send_to(text_data=json.dumps(dict(HELLO, deployment="pickcube-live")))
        await receive_until(robot, "session")
        warning = await receive_until(robot, "warning")
        await robot.disconnect(timeout=10)
        return warning

    warning = asyncio.run(scenario())
    assert "recorded but not scored" in warning["message"] and "'rewards' scope" in warning["message"]
