"""robot_agent.uploader.IngestClient on its own, against a scripted `_send`: connection errors, timeouts, 429
and 5xx are retried with a capped exponential backoff; an error is never taken for success (an empty error
message, an empty or non-JSON 200); a 4xx is final at once; `upload_episode` asks the server what it has
and sends only the missing chunks. The same client against a killed and restarted real server:
tests/labeling/test_uploader_web_killed.py."""

from __future__ import annotations

import http.client
import json

import pytest

from robot_agent import uploader as uploader_module
from robot_agent.uploader import IngestClient, UploadError


class Script:
    """Answers `_send` with the scripted outcomes in turn: an exception to raise or (status, text, retry_after)."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, str]] = []

    def __call__(self, method, path, body, headers):
        self.calls.append((method, path))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(uploader_module.time, "sleep", slept.append)
    return slept


def client(script: Script, **options) -> IngestClient:
    made = IngestClient("http://127.0.0.1:1", "token", **options)
    made._send = script  # type: ignore[method-assign]
    return made


OK = (200, json.dumps({"created": 10, "skipped": 0, "num_steps": 10}), 0.0)


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(111, "Connection refused"),
        ConnectionResetError(),  # the message is empty: it used to count as stored
        OSError(""),
        TimeoutError("timed out"),
        http.client.RemoteDisconnected(""),
    ],
)
def test_a_connection_error_is_retried_after_a_backoff_and_the_answer_returned(error, sleeps):
    script = Script(error, error, OK)
    assert client(script, backoff_s=0.5).call("POST", "/api/episodes/x/steps", b"chunk") == json.loads(OK[1])
    assert len(script.calls) == 3 and sleeps == [0.5, 1.0]


def test_a_connection_error_that_outlasts_the_retries_is_raised_never_taken_for_success(sleeps):
    script = Script(*[ConnectionResetError()] * 4)
    with pytest.raises(ConnectionResetError):
        client(script, retries=3).call("POST", "/api/episodes/x/steps", b"chunk")
    assert len(script.calls) == 4 and len(sleeps) == 3


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_429_and_every_5xx_are_retried(status, sleeps):
    script = Script((status, '{"detail": "busy"}', 0.0), OK)
    assert client(script).call("POST", "/api/episodes/x/steps", b"chunk")["created"] == 10
    assert len(script.calls) == 2


def test_the_backoff_doubles_up_to_its_cap_and_honours_retry_after(sleeps):
    script = Script(*[(503, "{}", 0.0)] * 5, (503, "{}", 7.0), OK)
    client(script, retries=6, backoff_s=1.0, max_backoff_s=4.0).call("GET", "/api/episodes/x/steps")
    assert sleeps == [1.0, 2.0, 4.0, 4.0, 4.0, 7.0]


def test_a_5xx_that_outlasts_the_retries_raises_upload_error_with_the_answer(sleeps):
    script = Script(*[(500, '{"detail": "server error"}', 0.0)] * 3)
    with pytest.raises(UploadError, match="HTTP 500: .*server error") as caught:
        client(script, retries=2).call("POST", "/api/episodes/x/finish", b"{}")
    assert caught.value.status == 500


def test_a_4xx_is_final_at_once(sleeps):
    script = Script((400, '{"steps": ["step 3: action: not a number"]}', 0.0))
    with pytest.raises(UploadError, match="HTTP 400: .*step 3") as caught:
        client(script).call("POST", "/api/episodes/x/steps", b"chunk")
    assert caught.value.status == 400 and len(script.calls) == 1 and sleeps == []


@pytest.mark.parametrize("text", ["", "<html>proxy page</html>", "[1, 2]"])
def test_a_2xx_without_a_json_object_is_an_error_not_a_stored_chunk(text, sleeps):
    with pytest.raises(UploadError, match="the answer is not"):
        client(Script((200, text, 0.0))).call("POST", "/api/episodes/x/steps", b"chunk")


class RecordingClient(IngestClient):
    def __post_init__(self) -> None:
        super().__post_init__()
        self.sent: list[list[int]] = []

    def append_steps(self, episode, steps, images):
        self.sent.append([step["index"] for step in steps])
        return super().append_steps(episode, steps, images)


def test_upload_episode_asks_what_the_server_has_and_sends_only_the_missing_chunks(sleeps):
    episode = "6f1e0c52-5c38-4a4e-9d0a-3cd7a8f0f7a1"
    stored = {"num_steps": 25, "ranges": [[0, 19], [30, 34]]}
    script = Script(
        (200, json.dumps({"uuid": episode}), 0.0),  # create: the episode exists already
        ConnectionResetError(),  # the question fails once, then is answered
        (200, json.dumps(stored), 0.0),
        OK,
        OK,
        OK,
        (200, json.dumps({"status": "finished"}), 0.0),
    )
    made = RecordingClient("http://127.0.0.1:1", "token")
    made._send = script  # type: ignore[method-assign]
    steps = [{"index": i} for i in range(50)]
    images: list[dict[str, bytes]] = [{} for _ in steps]
    assert made.upload_episode("PickCube", steps, images, chunk_steps=10, episode=episode) == episode
    # chunk 30-39 is only half stored: it is sent whole (the server skips what it has)
    assert made.sent == [list(range(20, 30)), list(range(30, 40)), list(range(40, 50))]
    assert script.calls[1:3] == [("GET", f"/api/episodes/{episode}/steps")] * 2
    assert script.calls[-1] == ("POST", f"/api/episodes/{episode}/finish")


def test_a_list_of_stored_steps_the_client_cannot_read_is_an_error(sleeps):
    script = Script((200, json.dumps({"num_steps": 3}), 0.0))
    with pytest.raises(UploadError, match="stored steps is not understood"):
        client(script).stored_ranges("6f1e0c52-5c38-4a4e-9d0a-3cd7a8f0f7a1")
