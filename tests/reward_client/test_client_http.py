"""RewardClient's HTTP against a stub server in this process: kept-alive connections, the query string,
errors, timeouts and retries, redirects, and a caller's requests.Session (no Django, no worker)."""

from __future__ import annotations

import io
import json
import pickle
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
import requests

from reward_client import (
    AuthenticationError,
    BadRequestError,
    ConnectionFailed,
    NotFoundError,
    RewardClient,
    RewardServiceError,
    ServiceUnavailable,
)

ITEM = {"probability": 0.25, "success": False, "reward": -1.0, "scored": True, "model_output": 0.5}


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), StubHandler)
        self.requests: list[dict] = []  # path, query, headers and body length of each request
        self.connections = 0
        self.answers: dict[str, tuple[int, dict[str, str], bytes]] = {}  # path -> status, headers, body
        self.first: list[tuple[int, dict[str, str], bytes] | None] = []  # the next answers; None: hang up instead

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class StubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: StubServer

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        parts = urlsplit(self.path)
        self.server.requests.append(
            {"path": parts.path, "query": parse_qs(parts.query), "headers": dict(self.headers), "body": body}
        )
        status, headers, answer = self.server.answers.get(
            parts.path,
            (200, {"Content-Type": "application/json"}, json.dumps({"items": [ITEM], "version": 7}).encode()),
        )
        if self.server.first:
            first = self.server.first.pop(0)
            if first is None:  # as a web process killed mid-request: the connection closes with no answer
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            status, headers, answer = first
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(answer))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[StubServer]:
    server = StubServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def image(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(1, 8, 8, 3), dtype=np.uint8)


def test_requests_share_one_kept_alive_connection_and_send_the_npy_body(stub):
    client = RewardClient(stub.url, "rs_token", "pick", transport="http")
    results = [client.compute_rewards(image(seed)) for seed in range(5)]

    assert stub.connections == 1
    assert [r["path"] for r in stub.requests] == ["/api/deployments/pick/rewards"] * 5
    first = stub.requests[0]
    assert first["headers"]["Authorization"] == "Bearer rs_token"
    assert first["headers"]["Content-Type"] == "application/x-npy"
    assert first["query"] == {}
    np.testing.assert_array_equal(np.load(io.BytesIO(first["body"])), image(0))
    result = results[-1]
    assert result.version == 7 and result.items == [ITEM]
    assert result.rewards.tolist() == [-1.0] and result.probabilities.tolist() == [0.25]
    assert result.success.tolist() == [False] and result.scored.tolist() == [True]
    assert result.model_outputs is not None and result.model_outputs.tolist() == [0.5]


def test_per_image_arguments_go_in_the_query_string_and_a_path_prefix_is_kept(stub):
    client = RewardClient(f"{stub.url}/studio/api/deployments/pick", None, transport="http")
    client.compute_rewards(
        np.concatenate([image(0), image(1)]),
        env_rewards=np.array([0.5, -1.0]),
        dones=[False, True],
        stream="rank0",
        env_success=np.array([1, 0]),
        episode_ids=[3, 4],
    )
    sent = stub.requests[0]
    assert sent["path"] == "/studio/api/deployments/pick/rewards"
    assert "Authorization" not in sent["headers"]
    assert sent["query"] == {
        "env_rewards": ["0.5,-1.0"],
        "dones": ["0,1"],
        "stream": ["rank0"],
        "env_success": ["1,0"],
        "episode_ids": ["3,4"],
    }


@pytest.mark.parametrize(
    ("status", "answer", "error", "message"),
    [
        (401, {"detail": "Invalid token."}, AuthenticationError, "HTTP 401: Invalid token."),
        (404, {"detail": "no deployment named 'pick'"}, NotFoundError, "HTTP 404: no deployment named 'pick'"),
        (429, {"error": {"message": "slow down"}}, BadRequestError, "HTTP 429: slow down"),
        (503, {"detail": "model failed to load"}, ServiceUnavailable, "HTTP 503: model failed to load"),
        (500, "plain text failure", RewardServiceError, "HTTP 500: plain text failure"),
    ],
)
def test_http_errors_carry_the_status_and_the_servers_message(stub, status, answer, error, message):
    body = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
    stub.answers["/api/deployments/pick/rewards"] = (status, {}, body)
    with pytest.raises(error) as info:
        RewardClient(stub.url, "rs_token", "pick", transport="http").compute_rewards(image())
    assert str(info.value) == message and info.value.status == status
    assert type(info.value) is error


def test_a_silent_server_times_out_and_is_retried_with_backoff():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections (the kernel does) and never answers
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        client = RewardClient(url, "rs_token", "pick", timeout=0.2, retries=2, backoff_s=0.05)
        started = time.monotonic()
        with pytest.raises(ConnectionFailed, match="after 3 tries") as info:
            client.compute_rewards(image())
        elapsed = time.monotonic() - started
    finally:
        listener.close()
    assert "timed out" in str(info.value)
    assert 3 * 0.2 + 0.05 + 0.1 <= elapsed < 5  # three timeouts and two backoffs (0.05 s, then 0.1 s)


def test_a_refused_connection_is_retried_then_reported(stub):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once closed
    client = RewardClient(f"http://127.0.0.1:{port}", "rs_token", "pick", retries=1, backoff_s=0.01)
    with pytest.raises(ConnectionFailed, match=f"cannot reach http://127.0.0.1:{port}/api/deployments/pick/rewards"):
        client.compute_rewards(image())


def test_a_request_a_crash_lost_is_sent_again_and_answered(stub):
    """A connection closed with no answer (the web process died) and a proxy's 502 are retried with backoff."""
    stub.first = [None, (502, {}, b"<html>Bad Gateway</html>"), None]
    client = RewardClient(stub.url, "rs_token", "pick", transport="http", retries=3, backoff_s=0.01)
    result = client.compute_rewards(image())
    assert result.probabilities.tolist() == [0.25] and client.lost_retried == 3
    assert len(stub.requests) == 4  # the same request, sent four times


def test_a_502_past_the_retries_is_raised_with_its_status(stub):
    stub.first = [(502, {}, b"Bad Gateway")] * 3
    client = RewardClient(stub.url, "rs_token", "pick", transport="http", retries=2, backoff_s=0.01)
    with pytest.raises(RewardServiceError) as info:
        client.compute_rewards(image())
    assert info.value.status == 502 and len(stub.requests) == 3 and client.lost_retried == 2


def test_a_redirect_is_followed_through_requests_from_then_on(stub):
    stub.answers["/api/deployments/pick/rewards"] = (307, {"Location": "/api/deployments/moved/rewards"}, b"")
    client = RewardClient(stub.url, "rs_token", "pick", transport="http")
    assert client.compute_rewards(image(), dones=[True]).version == 7
    # the pool's request got the redirect; the same request through requests followed it
    pick, moved = "/api/deployments/pick/rewards", "/api/deployments/moved/rewards"
    assert [r["path"] for r in stub.requests] == [pick, pick, moved]
    assert stub.requests[0]["query"] == stub.requests[1]["query"] == {"dones": ["1"]}
    assert stub.requests[2]["headers"]["Authorization"] == "Bearer rs_token"
    assert stub.requests[2]["body"] == stub.requests[0]["body"]
    client.compute_rewards(image())
    assert [r["path"] for r in stub.requests[3:]] == [pick, moved]


def test_a_callers_requests_session_carries_the_rewards_requests(stub):
    class CountingSession(requests.Session):
        sent = 0

        def request(self, *args, **kwargs):
            CountingSession.sent += 1
            return super().request(*args, **kwargs)

    session = CountingSession()
    client = RewardClient(stub.url, "rs_token", "pick", session=session, transport="http")
    assert client.compute_rewards(image(), env_rewards=[2.0]).rewards.tolist() == [-1.0]
    assert CountingSession.sent == 1
    assert stub.requests[0]["query"] == {"env_rewards": ["2.0"]}
    assert session.headers["Authorization"] == "Bearer rs_token"


def test_a_pickled_client_opens_its_own_connection(stub):
    client = RewardClient(stub.url, "rs_token", "pick", timeout=5.0, transport="http")
    client.compute_rewards(image())
    copy = pickle.loads(pickle.dumps(client))
    assert copy.compute_rewards(image()).version == 7
    assert stub.connections == 2 and copy.timeout == 5.0
    assert stub.requests[1]["headers"]["Authorization"] == "Bearer rs_token"
    on_requests = pickle.loads(
        pickle.dumps(RewardClient(stub.url, "rs_token", "pick", session=requests.Session(), transport="http"))
    )
    assert on_requests._pool is None and on_requests.compute_rewards(image()).version == 7


def test_auto_transport_uses_http_where_the_server_offers_no_same_host_path(stub):
    client = RewardClient(stub.url, "rs_token", "pick")  # transport "auto": asks GET /api/shm once (no GET here)
    assert client.compute_rewards(image()).rewards.tolist() == [-1.0]
    assert client.compute_rewards(image(1)).rewards.tolist() == [-1.0]
    assert client.transport_used == "http" and "/api/shm" in client.shm_reason
    assert [r["headers"]["Content-Type"] for r in stub.requests] == ["application/x-npy"] * 2
    with pytest.raises(RewardServiceError, match="transport='shm' is not possible: GET /api/shm"):
        RewardClient(stub.url, "rs_token", "pick", transport="shm").compute_rewards(image())
    with pytest.raises(ValueError, match="transport must be one of auto, http, shm"):
        RewardClient(stub.url, "rs_token", "pick", transport="tcp")
