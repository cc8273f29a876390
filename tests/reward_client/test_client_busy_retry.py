"""RewardClient retries a 503 that says the service is busy (it carries `Retry-After`), with exponential backoff
bounded in tries and time, and nothing else.

Edge cases against a real local HTTP server that answers from a script; then the real service: its queue
bounds refuse a request (a 503 with `Retry-After`), the client waits and gets the 200 once there is room, and an
unhealthy deployment's 503 (no `Retry-After`) is raised at the first answer.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import requests

from reward_client import BadRequestError, RewardClient, RewardServiceError, ServiceBusy, ServiceUnavailable

OK: tuple[int, dict[str, str], object] = (
    200,
    {},
    {"items": [{"probability": 0.25, "success": False, "reward": -1.0, "scored": True}], "version": 3},
)
BUSY = {"detail": "the inference queue of deployment 'pick' is full: the workers are behind; retry shortly"}


class ScriptedServer(ThreadingHTTPServer):
    """Answers each POST with the next (status, headers, JSON) of `script`, then with its last one forever;
    records when each request came."""

    daemon_threads = True

    def __init__(self, script: list[tuple[int, dict[str, str], object]]) -> None:
        super().__init__(("127.0.0.1", 0), ScriptedHandler)
        self.script = script
        self.times: list[float] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ScriptedHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ScriptedServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.times.append(time.monotonic())
        status, headers, answer = self.server.script[min(len(self.server.times), len(self.server.script)) - 1]
        body = json.dumps(answer).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json", "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def serve() -> Iterator:
    servers: list[ScriptedServer] = []

    def start(*script: tuple[int, dict[str, str], object]) -> ScriptedServer:
        server = ScriptedServer(list(script))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def image() -> np.ndarray:
    return np.zeros((1, 4, 4, 3), np.uint8)


@pytest.fixture(params=["urllib3", "requests"])
def client_for(request):
    """A client of the URL through its urllib3 pool (the rewards hot path) or through requests (`session=`)."""

    def make(url: str, **options) -> RewardClient:
        if request.param == "requests":
            options["session"] = requests.Session()
        return RewardClient(url, None, "pick", transport="http", **options)

    return make


def test_a_busy_503_is_retried_no_sooner_than_retry_after(serve, client_for):
    server = serve((503, {"Retry-After": "1"}, BUSY), (503, {"Retry-After": "1"}, BUSY), OK)
    client = client_for(server.url, backoff_s=0.01)
    result = client.compute_rewards(image())
    assert result.version == 3 and len(server.times) == 3 and client.busy_retried == 2
    gaps = np.diff(server.times)
    assert (gaps >= 1.0).all() and (gaps < 1.25 + 0.5).all()  # Retry-After, times the 1-1.25 spread


def test_retry_after_as_an_http_date_is_honoured(serve, client_for):
    server = serve((503, {"Retry-After": formatdate(time.time() + 2, usegmt=True)}, BUSY), OK)
    client_for(server.url, backoff_s=0.01).compute_rewards(image())
    assert len(server.times) == 2 and server.times[1] - server.times[0] >= 0.9  # the date has 1 s resolution


def test_without_a_longer_retry_after_the_backoff_doubles_up_to_its_cap(serve, client_for):
    server = serve(*[(503, {"Retry-After": "0"}, BUSY)] * 4, OK)
    client = client_for(server.url, backoff_s=0.1, busy_backoff_max_s=0.3)
    client.compute_rewards(image())
    gaps = np.diff(server.times)
    assert len(gaps) == 4
    for gap, expected in zip(gaps, [0.1, 0.2, 0.3, 0.3], strict=True):  # 0.4 capped at 0.3
        assert expected <= gap < expected * 1.25 + 0.15


@pytest.mark.parametrize(
    ("status", "headers", "error"),
    [
        (503, {}, ServiceUnavailable),  # unhealthy, no worker running, a model that fails to load
        (429, {"Retry-After": "1"}, BadRequestError),  # a rate limit: the caller sends too much
        (500, {"Retry-After": "1"}, RewardServiceError),
        (504, {"Retry-After": "1"}, RewardServiceError),  # a 502 (the web process died) is sent again: test_client_http
    ],
)
def test_every_other_error_is_raised_at_the_first_answer(serve, client_for, status, headers, error):
    server = serve((status, headers, {"detail": "no"}), OK)
    client = client_for(server.url, backoff_s=0.01)
    with pytest.raises(error) as info:
        client.compute_rewards(image())
    assert type(info.value) is error and info.value.status == status
    assert len(server.times) == 1 and client.busy_retried == 0


def test_it_gives_up_after_busy_retries_with_a_clear_error(serve, client_for):
    server = serve((503, {"Retry-After": "0"}, BUSY))
    client = client_for(server.url, backoff_s=0.01, busy_retries=3)
    with pytest.raises(ServiceBusy) as info:
        client.compute_rewards(image())
    assert len(server.times) == 4 and info.value.status == 503
    message = str(info.value)
    assert "is full" in message and "still busy after 4 tries" in message and "busy_retries=3" in message


def test_it_does_not_start_a_retry_past_busy_retry_max_s(serve, client_for):
    server = serve((503, {"Retry-After": "30"}, BUSY), OK)
    client = client_for(server.url, backoff_s=0.01, busy_retry_max_s=5)
    started = time.monotonic()
    with pytest.raises(ServiceBusy, match="busy_retry_max_s=5") as info:
        client.compute_rewards(image())
    assert time.monotonic() - started < 1 and len(server.times) == 1  # a 30 s wait would pass the 5 s budget
    assert info.value.retry_after_s == 30


def test_busy_retries_zero_turns_it_off(serve, client_for):
    server = serve((503, {"Retry-After": "0"}, BUSY), OK)
    with pytest.raises(ServiceBusy, match="is full"):
        client_for(server.url, busy_retries=0).compute_rewards(image())
    assert len(server.times) == 1


def test_negative_limits_are_refused_by_name():
    with pytest.raises(ValueError, match="busy_retries, busy_retry_max_s and busy_backoff_max_s must be >= 0"):
        RewardClient("http://127.0.0.1:9", None, "pick", busy_retries=-1)


# --- the real service -------------------------------------------------------------------------------------


@pytest.fixture
def rl_token(db):
    from projects.services import agent_create

    return agent_create(name="rl-busy", kind="rl_worker", all_projects=True)[1]


def counting_session(token: str) -> tuple[requests.Session, list[tuple[int, str | None]]]:
    """A requests.Session recording (status, Retry-After) of every answer the client gets."""
    answers: list[tuple[int, str | None]] = []
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    session.hooks["response"].append(lambda r, *a, **k: answers.append((r.status_code, r.headers.get("Retry-After"))))
    return session, answers


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_service_says_busy_when_its_queue_is_full_and_the_client_gets_the_answer_once_there_is_room(
    project, rl_token, live_server_url, inference_worker_process
):
    import redis
    from django.conf import settings

    from inference.broker import share_key
    from tests.inference.conftest import deploy, make_trained_model, random_images

    deployment = deploy(make_trained_model(project, seed=3))
    client = RewardClient(live_server_url, rl_token, deployment.name, transport="http")
    client.compute_rewards(random_images(1))  # the worker loads the model
    r = redis.Redis.from_url(settings.REDIS_URL)
    waiting_bytes = settings.INFERENCE_QUEUE_MAX_BYTES  # as if that many payload bytes were waiting
    r.hset(share_key(deployment.name), "*b", waiting_bytes)
    try:
        # what any caller gets meanwhile, on both paths (the `.npy` fast path and DRF's JSON view)
        npy = requests.post(
            f"{live_server_url}/api/deployments/{deployment.name}/rewards",
            data=_npy(random_images(1)),
            headers={"Authorization": f"Bearer {rl_token}", "Content-Type": "application/x-npy"},
            timeout=30,
        )
        assert npy.status_code == 503 and npy.headers["Retry-After"] == "1", npy.text
        assert "INFERENCE_QUEUE_MAX_BYTES" in npy.json()["detail"]
        as_json = requests.post(
            f"{live_server_url}/api/deployments/{deployment.name}/rewards",
            json={"images": [_png_base64(random_images(1)[0])]},
            headers={"Authorization": f"Bearer {rl_token}"},
            timeout=30,
        )
        assert as_json.status_code == 503 and as_json.headers["Retry-After"] == "1", as_json.text

        # the room comes back 2.5 s later (the waiting requests were answered)
        timer = threading.Timer(2.5, lambda: r.hincrby(share_key(deployment.name), "*b", -waiting_bytes))
        timer.start()
        session, answers = counting_session(rl_token)
        busy_client = RewardClient(live_server_url, rl_token, deployment.name, session=session, transport="http")
        started = time.monotonic()
        result = busy_client.compute_rewards(random_images(2))
        took = time.monotonic() - started
        timer.join()
    finally:
        r.hdel(share_key(deployment.name), "*b")
    assert result.probabilities.shape == (2,) and not np.isnan(result.probabilities).any()
    assert answers[-1] == (200, None) and len(answers) >= 3
    assert all(answer == (503, "1") for answer in answers[:-1])  # every busy answer said when to come back
    assert busy_client.busy_retried == len(answers) - 1 and 2.5 <= took < 30


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_unhealthy_deployments_503_is_not_retried(project, rl_token, live_server_url, inference_worker_process):
    from tests.inference.conftest import deploy, make_trained_model, random_images

    deployment = deploy(make_trained_model(project, checkpoint_path="checkpoints/does-not-exist"))
    session, answers = counting_session(rl_token)
    client = RewardClient(live_server_url, rl_token, deployment.name, session=session, transport="http")
    with pytest.raises(ServiceUnavailable, match="failed to load") as info:
        client.compute_rewards(random_images(1))
    assert type(info.value) is ServiceUnavailable
    assert answers == [(503, None)] and client.busy_retried == 0


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _png_base64(image: np.ndarray) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()
