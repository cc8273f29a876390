"""Each kind of bad input gets a 4xx with a message, and nothing of it is stored."""

from __future__ import annotations

import io
import json
import uuid

import numpy as np
import pytest
from django.core.files.storage import default_storage
from PIL import Image
from rest_framework.test import APIClient

from labeling.models import Episode, Frame, Step

from .broken_pngs import broken_png
from .ingest_helpers import multipart_chunk, npy_bytes, png_bytes, step_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def episode_url(agent_client, project):
    episode_id = uuid.uuid4()
    agent_client.post("/api/episodes", {"project": project.name, "uuid": str(episode_id)}, format="json")
    agent_client.post(f"/api/episodes/{episode_id}/steps", multipart_chunk([0]), format="multipart")
    return f"/api/episodes/{episode_id}/steps"


def stored_state():
    files = []
    if default_storage.exists("frames"):
        stack = ["frames"]
        while stack:
            folder = stack.pop()
            dirs, names = default_storage.listdir(folder)
            files += [f"{folder}/{n}" for n in names]
            stack += [f"{folder}/{d}" for d in dirs]
    return Episode.objects.count(), Step.objects.count(), Frame.objects.count(), sorted(files)


def bomb_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4000, 4000)).save(buffer, format="PNG")  # compresses to a few KB
    return buffer.getvalue()


def wide_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (2100, 8)).save(buffer, format="PNG")
    return buffer.getvalue()


def huge_npy() -> bytes:
    return npy_bytes(np.zeros((3000, 10, 3), dtype=np.uint8))


BAD_FRAMES = {
    "undecodable bytes": (b"\x89PNG\r\n\x1a\nnot really a png", "undecodable"),
    "truncated PNG": (png_bytes(1)[:60], "undecodable"),
    "PNG with valid chunks and corrupt image data": (broken_png("corrupt stream"), "compressed image data is corrupt"),
    "PNG whose image data is one byte short": (broken_png("too few bytes"), "inflates to 1167 bytes, its header"),
    "grayscale": (png_bytes(1, mode="L"), "3 channels"),
    "RGBA": (png_bytes(1, mode="RGBA"), "3 channels"),
    "decompression bomb": (bomb_png(), "image is 4000x4000; the limit is 2048 px a side"),  # from IHDR alone
    "too wide": (wide_png(), "limit"),
    "raw array too large": (huge_npy(), "limit"),
    "raw array of floats": (npy_bytes(np.zeros((8, 8, 3), dtype=np.float32)), "uint8"),
    "raw array with 4 channels": (npy_bytes(np.zeros((8, 8, 4), dtype=np.uint8)), "HxWx3"),
    "GIF": (
        b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,"
        b"\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;",
        "PNG or JPEG",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FRAMES))
def test_a_bad_frame_rejects_the_whole_chunk(agent_client, episode_url, case):
    raw, expected = BAD_FRAMES[case]
    before = stored_state()
    chunk = multipart_chunk([1, 2, 3], images={(3, "extra"): raw})
    response = agent_client.post(episode_url, chunk, format="multipart")
    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    assert "step 3" in detail and "extra" in detail and expected in detail, detail
    assert stored_state() == before


BAD_CHUNKS = {
    "unknown camera": (lambda: multipart_chunk([1, 2], cameras=("main", "wrist")), 400, "unknown camera 'wrist'"),
    "reward not a number": (
        lambda: {"steps": json.dumps([*step_rows([1]), {"index": 2, "reward": "high"}])},
        400,
        "step 2: reward",
    ),
    "negative index": (lambda: {"steps": json.dumps([{"index": -1}])}, 400, "index"),
    "same index twice": (lambda: {"steps": json.dumps(step_rows([1, 1]))}, 400, "same step index twice"),
    "steps not JSON": (lambda: {"steps": "[{"}, 400, "not valid JSON"),
    "no steps": (lambda: {"steps": "[]"}, 400, "non-empty list"),
    "file for a step not in the chunk": (
        lambda: {"steps": json.dumps(step_rows([1])), "frame.9.main": io.BytesIO(png_bytes(1))},
        400,
        "step 9",
    ),
    "badly named file": (
        lambda: {"steps": json.dumps(step_rows([1])), "picture": io.BytesIO(png_bytes(1))},
        400,
        "frame.<index>.<camera>",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CHUNKS))
def test_a_bad_chunk_is_rejected_with_a_message(agent_client, episode_url, case):
    build, code, expected = BAD_CHUNKS[case]
    before = stored_state()
    response = agent_client.post(episode_url, build(), format="multipart")
    assert response.status_code == code, response.content
    assert expected in response.json()["detail"], response.json()
    assert stored_state() == before


def test_bad_base64_in_a_json_chunk(agent_client, episode_url):
    before = stored_state()
    body = {"steps": [{"index": 5, "images": {"main": "%%% not base64"}}]}
    response = agent_client.post(episode_url, body, format="json")
    assert response.status_code == 400 and "base64" in response.json()["detail"]
    assert stored_state() == before


def test_missing_or_wrong_tokens_are_refused(project, agent_token):
    anonymous = APIClient()
    body = {"project": project.name, "uuid": str(uuid.uuid4())}
    assert anonymous.post("/api/episodes", body, format="json").status_code in (401, 403)
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer rs_not-a-token")
    response = wrong.post("/api/episodes", body, format="json")
    assert response.status_code == 401 and "token" in response.json()["detail"]
    agent, _ = agent_token
    agent.is_active = False
    agent.save()
    revoked = APIClient()
    revoked.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_token[1]}")
    assert revoked.post("/api/episodes", body, format="json").status_code == 401
    assert Episode.objects.count() == 0


def test_unknown_project_and_episode(agent_client):
    response = agent_client.post("/api/episodes", {"project": "Nope", "uuid": str(uuid.uuid4())}, format="json")
    assert response.status_code == 400 and "Nope" in response.json()["detail"]
    assert (
        agent_client.post(f"/api/episodes/{uuid.uuid4()}/steps", multipart_chunk([0]), format="multipart").status_code
        == 404
    )
    assert Episode.objects.count() == 0


def test_new_steps_after_finish_are_refused(agent_client, episode_url):
    agent_client.post(episode_url.replace("/steps", "/finish"), {}, format="json")
    before = stored_state()
    response = agent_client.post(episode_url, multipart_chunk([7]), format="multipart")
    assert response.status_code == 409 and "finished" in response.json()["detail"]
    assert stored_state() == before


@pytest.mark.parametrize("index", [2**31, 2**63, 10**30])
def test_huge_step_index_is_a_400_not_a_500(agent_client, episode_url, index):
    before = stored_state()
    response = agent_client.post(episode_url, {"steps": [{"index": index}]}, format="json")
    assert response.status_code == 400, response.content
    assert "index" in response.json()["detail"]
    assert stored_state() == before


def test_chunk_limits_are_checked_before_any_image_is_read(agent_client, episode_url, settings):
    settings.INGEST_MAX_IMAGES_PER_CHUNK = 3
    settings.INGEST_MAX_STEPS_PER_CHUNK = 4
    before = stored_state()
    # Four images where three are allowed: 413 although one of them is not even an image.
    chunk = multipart_chunk([1, 2], images={(2, "extra"): b"not an image"})
    response = agent_client.post(episode_url, chunk, format="multipart")
    assert response.status_code == 413 and "INGEST_MAX_IMAGES_PER_CHUNK" in response.json()["detail"]
    response = agent_client.post(episode_url, {"steps": step_rows(range(1, 6))}, format="json")
    assert response.status_code == 413 and "INGEST_MAX_STEPS_PER_CHUNK" in response.json()["detail"]
    # Pixels of the whole chunk, from the headers: two 32x32 frames fit 2048 pixels, four do not.
    settings.INGEST_MAX_IMAGES_PER_CHUNK = 100
    settings.MAX_REQUEST_PIXELS = 3000
    response = agent_client.post(episode_url, multipart_chunk([1, 2]), format="multipart")
    assert response.status_code == 413 and "MAX_REQUEST_PIXELS" in response.json()["detail"]
    assert stored_state() == before
