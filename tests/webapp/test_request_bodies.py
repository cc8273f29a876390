"""Bodies refused before they are read: a JSON step chunk past INGEST_JSON_CHUNK_MAX_BYTES (413), and any body
past ANONYMOUS_BODY_MAX_BYTES sent with neither a token nor a session cookie (401), both from the declared length
or, without one, as soon as the body grows past the limit (webapp.security.body_limit). A JSON chunk's steps
without their images are held to CHUNK_HEADER_MAX_BYTES like the binary header and the multipart steps field
(the 60 MiB JSON chunk of the 2026-12-06 pass used to be stored after 48-58 s)."""

from __future__ import annotations

import base64
import http.client
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings

from labeling.models import Step

from ..labeling.ingest_helpers import png_bytes
from .test_body_limit import run as body_limit_run

STEPS_PATH = "/api/episodes/6f1e0c52-5c38-4a4e-9d0a-3cd7a8f0f7a1/steps"


def run(path: str, headers: dict[str, str], pieces: list[bytes]) -> tuple[int, Any, int, bytes]:
    """BodyLimit in front of an app that reads the whole body as Django does: (status, answer, reads, read)."""
    status, body, app, reads = body_limit_run(headers, pieces, path=path)
    return status, body, reads, app.read


TOKEN = {"authorization": "Bearer rs_x"}
JSON = {"content-type": "application/json"}


def test_a_json_step_chunk_past_its_limit_is_refused_unread_and_other_json_keeps_the_json_limit(settings):
    settings.INGEST_JSON_CHUNK_MAX_BYTES, settings.MAX_JSON_BODY_BYTES = 100_000, 1_000_000
    status, body, reads, _ = run(STEPS_PATH, {**TOKEN, **JSON, "content-length": "100001"}, [b"x"])
    assert (status, reads) == (413, 0) and "INGEST_JSON_CHUNK_MAX_BYTES" in body["detail"]
    status, body, reads, _ = run(STEPS_PATH, {**TOKEN, **JSON}, [b"[" * 60_000, b"[" * 60_000, b"]"])
    assert (status, reads) == (413, 2) and "body larger than 100000 bytes (INGEST_JSON_CHUNK_MAX_BYTES)" in body[
        "detail"
    ]
    status, _, _, read = run("/api/episodes", {**TOKEN, **JSON, "content-length": "200000"}, [b"y" * 200_000])
    assert status == 200 and len(read) == 200_000  # not a step chunk: MAX_JSON_BODY_BYTES
    status, _, _, _ = run(STEPS_PATH, {**TOKEN, "content-type": "multipart/form-data; b=1"}, [b"z" * 200_000])
    assert status == 200  # multipart chunks hold their steps field to CHUNK_HEADER_MAX_BYTES in the view


def test_an_anonymous_body_past_its_limit_is_refused_with_401_before_it_is_read(settings):
    settings.ANONYMOUS_BODY_MAX_BYTES = 10_000
    status, body, reads, _ = run("/api/episodes", {**JSON, "content-length": "10001"}, [b"x" * 10_001])
    assert (status, reads) == (401, 0)
    assert "anonymous body of 10001 bytes is refused unread" in body["detail"]
    assert "ANONYMOUS_BODY_MAX_BYTES" in body["detail"]
    status, body, reads, _ = run("/accounts/login/", {}, [b"a" * 6000, b"a" * 6000, b"a"])
    assert (status, reads) == (401, 2) and "ANONYMOUS_BODY_MAX_BYTES" in body["detail"]  # no length: cut at once
    assert run("/accounts/login/", {"content-length": "9000"}, [b"u" * 9000])[0] == 200  # the login form fits
    for credentials in (TOKEN, {"cookie": f"csrftoken=a; {django_settings.SESSION_COOKIE_NAME}=abc"}):
        status, _, _, read = run("/api/episodes", {**credentials, **JSON}, [b"y" * 50_000])
        assert status == 200 and len(read) == 50_000  # Django decides about these credentials
    status, _, reads, _ = run("/api/episodes", {"cookie": "csrftoken=a", "content-length": "20000"}, [b"z"])
    assert (status, reads) == (401, 0)  # a CSRF cookie is not a session


@pytest.mark.django_db
def test_a_json_chunk_whose_steps_are_over_the_header_limit_is_413_and_images_do_not_count(
    agent_client, project, settings
):
    settings.CHUNK_HEADER_MAX_BYTES = 4096
    episode = str(uuid.uuid4())
    assert (
        agent_client.post("/api/episodes", {"project": project.name, "uuid": episode}, format="json").status_code == 201
    )
    path = f"/api/episodes/{episode}/steps"
    heavy = [{"index": i, "info": {"x": [1] * 300}} for i in range(10)]  # 10 x ~620 bytes of step fields
    answer = agent_client.post(path, {"steps": heavy}, format="json")
    assert answer.status_code == 413, answer.content
    assert "without their images are over 4096 bytes" in answer.json()["detail"]
    assert "CHUNK_HEADER_MAX_BYTES" in answer.json()["detail"]
    image = base64.b64encode(png_bytes(1, 64)).decode()  # the image alone is past the header limit
    assert len(image) > 4096
    light = [{"index": i, "info": {"x": [1] * 30}, "images": {"main": image}} for i in range(2)]
    answer = agent_client.post(path, {"steps": light}, format="json")
    assert answer.status_code == 200, answer.content
    assert Step.objects.filter(episode__uuid=episode).count() == 2


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_live_server_refuses_a_60_mib_json_chunk_and_an_anonymous_200_mib_body_at_once(
    live_server_url, agent_token, project
):
    token = agent_token[1]

    def declare(path: str, size: int, headers: dict[str, str]) -> tuple[int, bytes, float]:
        conn = http.client.HTTPConnection(urlsplit(live_server_url).netloc, timeout=30)
        started = time.monotonic()
        try:
            conn.putrequest("POST", path)
            for name, value in {"Content-Type": "application/json", "Content-Length": str(size), **headers}.items():
                conn.putheader(name, value)
            conn.endheaders()
            conn.send(b'{"steps": [' + b" " * 65536)
            response = conn.getresponse()
            return response.status, response.read(), time.monotonic() - started
        finally:
            conn.close()

    status, body, took = declare(STEPS_PATH, 60 << 20, {"Authorization": f"Bearer {token}"})
    assert status == 413 and b"INGEST_JSON_CHUNK_MAX_BYTES" in body and took < 5, (status, body, took)
    status, body, took = declare("/api/deployments/nope/rewards", 200 << 20, {"Content-Type": "application/x-npy"})
    assert status == 401 and b"ANONYMOUS_BODY_MAX_BYTES" in body and took < 5, (status, body, took)
