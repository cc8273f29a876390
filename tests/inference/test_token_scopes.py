"""Tokens that say what they lack: a token without the `rewards` scope hears 403 naming that scope on every
rewards route (JSON, .npy and same-host frames through the ASGI fast path, VLM windows and streams, the OpenAI
chat route, the same-host offer), whatever deployment it names; and a new token gets its kind's scopes, in the
admin too. The messages are the ones GET /api/deployments/<name>/access gives (projects.access.refusal)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from rest_framework.test import APIClient

from projects.models import Agent
from projects.services import agent_create

from .conftest import deploy, make_trained_model

pytestmark = pytest.mark.django_db(transaction=True)

LACKS_REWARDS = "this token lacks the 'rewards' scope needed to ask for rewards"
FRAME = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


def _npy() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((1, 8, 8, 3), np.uint8))
    return buffer.getvalue()


def _drf_routes(name: str) -> dict[str, tuple[str, str, object]]:
    """route -> (method, path, JSON body) for the rewards routes Django answers."""
    window = {"main": [FRAME] * 2, "extra": [FRAME] * 2, "env_reward": 0.0, "env_success": False}
    step = {"stream": "s0", "main": FRAME, "extra": FRAME}
    chat = {"model": name, "messages": [{"role": "user", "content": [{"type": "text", "text": "progress?"}]}]}
    return {
        "JSON rewards": ("post", f"/api/deployments/{name}/rewards", {"images": [FRAME]}),
        "VLM windows": ("post", f"/api/deployments/{name}/vlm/rewards", {"reward_mode": "window", "windows": [window]}),
        "VLM stream": ("post", f"/api/deployments/{name}/vlm/rewards", {"reward_mode": "stream", "steps": [step]}),
        "OpenAI chat": ("post", "/v1/chat/completions", chat),
        "same-host offer": ("get", "/api/shm", None),
    }


def _asgi_post(path: str, token: str, content_type: str, body: bytes) -> tuple[int, dict]:
    """POST through the ASGI application as webapp.asgi builds it (the fast path in front of Django)."""
    from webapp.asgi import application

    headers = [
        (b"host", b"testserver"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }

    async def call() -> tuple[int, dict]:
        communicator = ApplicationCommunicator(application, scope)
        await communicator.send_input({"type": "http.request", "body": body})
        start = await communicator.receive_output(timeout=60)
        chunks = []
        while True:
            message = await communicator.receive_output(timeout=60)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        return start["status"], json.loads(b"".join(chunks))

    return async_to_sync(call)()


def _answers(token: str, name: str) -> dict[str, tuple[int, str]]:
    """route -> (status, detail) for every rewards route, naming deployment `name`."""
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answers = {}
    for route, (method, path, body) in _drf_routes(name).items():
        response = getattr(api, method)(path, body, format="json") if body is not None else api.get(path)
        detail = response.json().get("detail") or response.json().get("error", {}).get("message", "")
        answers[route] = (response.status_code, detail)
    for route, content_type, body in (
        (".npy rewards (fast path)", "application/x-npy", _npy()),
        ("same-host frames (fast path)", "application/x-rs-shm", b"{}"),
    ):
        status, answer = _asgi_post(f"/api/deployments/{name}/rewards", token, content_type, body)
        answers[route] = (status, answer["detail"])
    return answers


@pytest.fixture
def deployment(project):
    return deploy(make_trained_model(project, seed=0))


def test_a_token_without_the_rewards_scope_hears_so_on_every_rewards_route(project, deployment, clear_rate_limits):
    from inference.shm.frames import MEDIA_TYPE

    assert MEDIA_TYPE == "application/x-rs-shm"
    as_the_admin_made_it = agent_create(name="no-scopes", kind="sim", scopes=[])[1]  # no scope, no project
    labeler = agent_create(name="labeler", kind="sim", scopes=["labels", "ingest"], projects=[project])[1]
    for token in (as_the_admin_made_it, labeler):
        for name in (deployment.name, "no-such-deployment"):
            answers = _answers(token, name)
            assert len(answers) == 7
            assert answers == {route: (403, LACKS_REWARDS) for route in answers}, name


def test_a_token_with_the_scope_still_sees_only_its_own_deployments(project, deployment, clear_rate_limits):
    from projects.models import Project

    elsewhere = agent_create(name="elsewhere", kind="rl_worker", projects=[Project.objects.create(name="other")])[1]
    answers = _answers(elsewhere, deployment.name)
    hidden = {route: answer for route, answer in answers.items() if route != "same-host offer"}
    assert {status for status, _ in hidden.values()} == {404}
    assert answers["same-host offer"][0] == 200
    own = APIClient()
    own.credentials(HTTP_AUTHORIZATION="Bearer " + agent_create(name="own", kind="rl_worker", projects=[project])[1])
    _, path, body = _drf_routes(deployment.name)["VLM windows"]
    refused = own.post(path, body, format="json")
    assert refused.status_code == 400, refused.content  # past the scope and the deployment, to what it serves
    assert "ResNet" in refused.json()["detail"] or "not a VLM" in refused.json()["detail"], refused.json()


def test_new_tokens_get_their_kinds_scopes_in_the_admin_too(client, admin_user):
    client.force_login(admin_user)
    response = client.post("/admin/projects/agent/add/", {"name": "rl-worker-admin", "kind": "rl_worker"}, follow=True)
    message = next(str(m) for m in response.context["messages"] if "rl-worker-admin" in str(m))
    assert Agent.objects.get(name="rl-worker-admin").scopes == ["rewards"]
    assert "with scopes rewards" in message
    client.post("/admin/projects/agent/add/", {"name": "sim-admin", "kind": "sim"})
    assert Agent.objects.get(name="sim-admin").scopes == ["ingest"]
    client.post("/admin/projects/agent/add/", {"name": "chosen", "kind": "rl_worker", "scopes": ["labels"]})
    assert Agent.objects.get(name="chosen").scopes == ["labels"]  # what the admin ticked, nothing more
