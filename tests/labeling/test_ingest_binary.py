"""Binary step chunks against the real ASGI server (uvicorn): the fast path in front of Django.

Stored rows and files, retries and concurrent duplicates, every kind of bad body with its 4xx, and
that a refused chunk leaves nothing behind."""

from __future__ import annotations

import http.client
import io
import struct
import threading
import uuid
from urllib.parse import urlsplit

import pytest
from django.core.files.storage import default_storage
from PIL import Image

from labeling.models import Episode, Frame, Step
from projects.services import agent_create
from robot_agent.chunk_format import CONTENT_TYPE, encode_chunk
from robot_agent.uploader import IngestClient, UploadError

from .broken_pngs import broken_png
from .ingest_helpers import npy_bytes, png_bytes, step_rows

pytestmark = pytest.mark.django_db(transaction=True)


def chunk(indices, cameras=("main", "extra"), size: int = 32, images: dict | None = None) -> tuple[list, list]:
    steps = step_rows(indices)
    frames = [{c: (images or {}).get((i, c)) or png_bytes(i * 10 + len(c), size) for c in cameras} for i in indices]
    return steps, frames


def post(url: str, token: str | None, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    import json

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.netloc, timeout=60)
    all_headers = {"Content-Type": CONTENT_TYPE, **(headers or {})}
    if token:
        all_headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request("POST", path, body=body, headers=all_headers)
        response = conn.getresponse()
        text = response.read()
    finally:
        conn.close()
    return response.status, json.loads(text) if text else {}


@pytest.fixture
def uploader(live_server_url, agent_token):
    with IngestClient(live_server_url, agent_token[1], retries=0) as client:
        yield client


@pytest.fixture
def episode(uploader, project):
    return uploader.create_episode(project.name, env_id="PickCube-v1")


def episode_files(episode_id: str) -> list[str]:
    episode = Episode.objects.get(uuid=episode_id)
    folder = f"frames/{episode.project_id}/{episode.uuid}"
    return sorted(default_storage.listdir(folder)[1]) if default_storage.exists(folder) else []


def test_an_agent_uploads_binary_chunks_and_every_step_and_file_is_stored(uploader, episode, project):
    for indices in ([0, 1, 2], [3, 4]):
        steps, frames = chunk(indices)
        assert uploader.append_steps(episode, steps, frames) == {
            "created": len(indices),
            "skipped": 0,
            "num_steps": indices[-1] + 1,
        }
    uploader.finish(episode)
    stored = Episode.objects.get(uuid=episode)
    assert stored.status == "finished" and stored.num_steps == 5 and stored.success is True
    rows = list(stored.steps.order_by("index"))
    assert [s.index for s in rows] == [0, 1, 2, 3, 4]
    assert rows[2].action == pytest.approx([0.2, -0.1]) and rows[2].reward == pytest.approx(0.2)
    assert rows[2].info == {"k": 2} and rows[4].env_success and not rows[1].env_success
    frame = Frame.objects.get(step=rows[1], camera="extra")
    assert (frame.width, frame.height) == (32, 32)
    with default_storage.open(frame.image.name, "rb") as handle:
        assert handle.read() == png_bytes(1 * 10 + len("extra"))
    assert len(episode_files(episode)) == 10 and Frame.objects.filter(step__episode=stored).count() == 10


def test_jpeg_and_npy_frames_go_through_the_binary_format_too(uploader, episode):
    import numpy as np

    buffer = io.BytesIO()
    Image.new("RGB", (24, 16), (200, 10, 10)).save(buffer, format="JPEG")
    array = np.full((8, 12, 3), 7, dtype=np.uint8)
    steps, frames = chunk([0], images={(0, "main"): buffer.getvalue(), (0, "extra"): npy_bytes(array)})
    assert uploader.append_steps(episode, steps, frames)["created"] == 1
    sizes = {f.camera: (f.width, f.height, f.image.name[-4:]) for f in Frame.objects.all()}
    assert sizes == {"main": (24, 16, ".jpg"), "extra": (12, 8, ".png")}


def test_a_retried_chunk_stores_nothing_twice(uploader, episode):
    steps, frames = chunk([0, 1])
    assert uploader.append_steps(episode, steps, frames)["created"] == 2
    assert uploader.append_steps(episode, steps, frames) == {"created": 0, "skipped": 2, "num_steps": 2}
    steps, frames = chunk([1, 2])
    assert uploader.append_steps(episode, steps, frames) == {"created": 1, "skipped": 1, "num_steps": 3}
    assert Step.objects.count() == 3 and Frame.objects.count() == 6 and len(episode_files(episode)) == 6
    uploader.finish(episode)
    steps, frames = chunk([0, 1, 2])
    assert uploader.append_steps(episode, steps, frames) == {"created": 0, "skipped": 3, "num_steps": 3}


def test_the_same_chunk_sent_by_many_connections_at_once_is_stored_once(live_server_url, agent_token, episode):
    steps, frames = chunk(list(range(10)))
    body = encode_chunk(steps, frames)
    barrier = threading.Barrier(8)
    answers = []

    def send():
        barrier.wait()
        answers.append(post(live_server_url, agent_token[1], f"/api/episodes/{episode}/steps", body))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [status for status, _ in answers] == [200] * 8
    assert sorted(answer["created"] for _, answer in answers) == [0] * 7 + [10]
    assert Step.objects.count() == 10 and Frame.objects.count() == 20 and len(episode_files(episode)) == 20
    assert Episode.objects.get(uuid=episode).num_steps == 10


def test_the_fast_path_keeps_token_scopes_and_episode_ownership(live_server_url, agent_token, project, episode):
    body = encode_chunk(*chunk([0]))
    path = f"/api/episodes/{episode}/steps"
    assert post(live_server_url, "not-a-token", path, body) == (401, {"detail": "Unknown or revoked agent token."})
    status, answer = post(live_server_url, None, path, body)
    assert status in (401, 403)  # no token: Django answers (sessions), and nobody is logged in
    _, no_scope = agent_create(name="viewer", kind="sim", scopes=["labels"], projects=[project])
    assert post(live_server_url, no_scope, path, body)[0] == 403
    _, other_project = agent_create(name="elsewhere", kind="sim", projects=[])
    assert post(live_server_url, other_project, path, body)[0] == 404
    _, other_agent = agent_create(name="neighbour", kind="sim", projects=[project])
    assert post(live_server_url, other_agent, path, body) == (403, {"detail": "this episode belongs to another agent"})
    assert post(live_server_url, agent_token[1], f"/api/episodes/{uuid.uuid4()}/steps", body)[0] == 404
    assert Step.objects.count() == 0 and episode_files(episode) == []


def test_an_agent_over_its_api_rate_gets_429_on_the_fast_path_and_nothing_is_stored(
    live_server_url, agent_token, episode, settings
):
    """The agent is remembered by now (it created the episode), so both limits go in one Redis call."""
    import asyncio

    import redis

    from projects.gate.limits import KEY_PREFIX, RateLimiter, rate_item

    body = encode_chunk(*chunk([0]))
    path = f"/api/episodes/{episode}/steps"
    limit = rate_item(settings.API_RATE_LIMIT)
    assert limit is not None
    store = redis.Redis.from_url(settings.REDIS_URL)

    def forget_counts():
        for key in store.scan_iter(KEY_PREFIX + "*"):
            store.delete(key)

    forget_counts()  # an empty window, then the agent's whole limit used up in one hit
    used = RateLimiter(settings.REDIS_URL).strategy.hit(limit, f"api:a{agent_token[0].pk}", cost=limit.amount)
    assert asyncio.run(used)
    try:
        status, answer = post(live_server_url, agent_token[1], path, body)
        assert status == 429 and "API rate limit reached for this token" in answer["detail"]
        assert Step.objects.count() == 0 and episode_files(episode) == []
    finally:
        forget_counts()
    assert post(live_server_url, agent_token[1], path, body)[0] == 200  # the window is free again


def test_a_finished_episode_refuses_new_steps_with_409(uploader, episode):
    uploader.finish(episode)
    with pytest.raises(UploadError) as refused:
        uploader.append_steps(episode, *chunk([0]))
    assert refused.value.status == 409 and "finished" in str(refused.value)


def bad_png(kind: str) -> bytes:
    good = png_bytes(3)
    if kind == "crc":
        return good[:40] + bytes([good[40] ^ 0xFF]) + good[41:]
    if kind == "truncated":
        return good[: len(good) // 2]
    if kind == "trailing":
        return good + b"junk"
    if kind == "broken data":
        return broken_png("corrupt stream")
    buffer = io.BytesIO()
    if kind == "huge":
        Image.new("RGB", (4000, 4000)).save(buffer, format="PNG")  # a few KB that would decode to 48 MB
    elif kind == "rgba":
        Image.new("RGBA", (8, 8)).save(buffer, format="PNG")
    elif kind == "gray":
        Image.new("L", (8, 8)).save(buffer, format="PNG")
    return buffer.getvalue()


BAD_IMAGES = {
    "crc": "CRC",
    "truncated": "truncated",
    "trailing": "after the PNG's IEND",
    "broken data": "compressed image data is corrupt",
    "huge": "limit is 2048 px a side",
    "rgba": "3 channels",
    "gray": "3 channels",
}


@pytest.mark.parametrize("kind", sorted(BAD_IMAGES))
def test_a_bad_image_gets_400_naming_it_and_the_chunk_leaves_nothing(live_server_url, agent_token, episode, kind):
    steps, frames = chunk([0, 1, 2], images={(2, "extra"): bad_png(kind)})
    status, answer = post(
        live_server_url, agent_token[1], f"/api/episodes/{episode}/steps", encode_chunk(steps, frames)
    )
    assert status == 400, answer
    assert answer["detail"].startswith("step 2: images.extra: ") and BAD_IMAGES[kind] in answer["detail"]
    assert Step.objects.count() == 0 and Frame.objects.count() == 0 and episode_files(episode) == []


def header_body(header: bytes, tail: bytes = b"", magic: bytes = b"RSC\x01") -> bytes:
    return magic + struct.pack(">I", len(header)) + header + tail


BAD_BODIES = {
    "empty": (b"", "shorter than"),
    "magic": (header_body(b"{}", magic=b"PNG\x01"), "not a step chunk"),
    "version": (header_body(b'{"steps": [{"index": 0}]}', magic=b"RSC\x07"), "version 7 is not supported"),
    "header past end": (b"RSC\x01" + struct.pack(">I", 1000) + b"{}", "body ends after"),
    "not json": (header_body(b"{steps"), "not valid UTF-8 JSON"),
    "no steps": (header_body(b'{"steps": []}'), "non-empty"),
    "negative index": (header_body(b'{"steps": [{"index": -1}]}'), "index must be an integer"),
    "unknown field": (header_body(b'{"steps": [{"index": 0, "colour": 1}]}'), "unknown field 'colour'"),
    "nan reward": (header_body(b'{"steps": [{"index": 0, "reward": NaN}]}'), "NaN"),
    "string flag": (header_body(b'{"steps": [{"index": 0, "success": "yes"}]}'), "success must be true or false"),
    "sizes short": (header_body(b'{"steps": [{"index": 0, "images": {"main": 10}}]}', b"12345"), "add up to"),
    "sizes long": (header_body(b'{"steps": [{"index": 0, "images": {"main": 1}}]}', b"12"), "add up to"),
    "twice": (header_body(b'{"steps": [{"index": 0}, {"index": 0}]}'), "same step index twice"),
}


@pytest.mark.parametrize("kind", sorted(BAD_BODIES))
def test_a_malformed_chunk_gets_400_saying_what_is_wrong(live_server_url, agent_token, episode, kind):
    body, message = BAD_BODIES[kind]
    status, answer = post(live_server_url, agent_token[1], f"/api/episodes/{episode}/steps", body)
    assert status == 400, answer
    assert message in answer["detail"]
    assert Step.objects.count() == 0


def test_an_unknown_camera_gets_400_and_nothing_is_stored(uploader, episode):
    with pytest.raises(UploadError) as refused:
        uploader.append_steps(episode, *chunk([0, 1], cameras=("main", "wrist")))
    assert refused.value.status == 400 and "unknown camera 'wrist'" in str(refused.value)
    assert Step.objects.count() == 0 and episode_files(episode) == []


def test_chunks_over_a_limit_get_413_naming_the_setting(live_server_url, agent_token, episode):
    path = f"/api/episodes/{episode}/steps"
    token = agent_token[1]
    too_many_steps = encode_chunk([{"index": i} for i in range(1001)], [{} for _ in range(1001)])
    status, answer = post(live_server_url, token, path, too_many_steps)
    assert status == 413 and "INGEST_MAX_STEPS_PER_CHUNK" in answer["detail"]

    tiny = png_bytes(0, size=2)
    steps = [{"index": i} for i in range(513)]
    status, answer = post(live_server_url, token, path, encode_chunk(steps, [{"main": tiny, "extra": tiny}] * 513))
    assert status == 413 and "INGEST_MAX_IMAGES_PER_CHUNK" in answer["detail"]

    buffer = io.BytesIO()
    Image.new("RGB", (2048, 2048)).save(buffer, format="PNG")  # 4.2 M pixels each, 13 over MAX_REQUEST_PIXELS
    big = buffer.getvalue()
    steps = [{"index": i} for i in range(7)]
    status, answer = post(live_server_url, token, path, encode_chunk(steps, [{"main": big, "extra": big}] * 7))
    assert status == 413 and "MAX_REQUEST_PIXELS" in answer["detail"]

    huge = 300 * 1024 * 1024  # declared, never sent: refused before the body is read
    status, answer = post(live_server_url, token, path, b"RSC\x01", {"Content-Length": str(huge)})
    assert status == 413 and "DATA_UPLOAD_MAX_MEMORY_SIZE" in answer["detail"]
    assert Step.objects.count() == 0


def test_multipart_chunks_still_work_next_to_binary_ones(live_server_url, agent_token, project):
    with IngestClient(live_server_url, agent_token[1], binary=False, retries=0) as multipart:
        episode = multipart.upload_episode(project.name, *chunk(list(range(6))), chunk_steps=4)
    stored = Episode.objects.get(uuid=episode)
    assert stored.num_steps == 6 and stored.status == "finished"
    assert Frame.objects.filter(step__episode=stored).count() == 12 and len(episode_files(episode)) == 12


def test_a_person_with_ingest_rights_sends_binary_chunks_through_django(user_client, uploader, episode):
    body = encode_chunk(*chunk([0, 1]))
    response = user_client.post(f"/api/episodes/{episode}/steps", data=body, content_type=CONTENT_TYPE)
    assert response.status_code == 200, response.content
    assert response.json() == {"created": 2, "skipped": 0, "num_steps": 2}
    bad = user_client.post(f"/api/episodes/{episode}/steps", data=b"RSC\x02....", content_type=CONTENT_TYPE)
    assert bad.status_code == 400 and "version 2" in bad.content.decode()


def post_json(url: str, token: str, path: str, body: bytes) -> tuple[int, dict]:
    return post(url, token, path, body, {"Content-Type": "application/json"})


def test_agents_create_and_finish_episodes_on_the_fast_path_with_the_views_answers(
    live_server_url, agent_token, project
):
    from projects.models import Project

    token, episode_id = agent_token[1], str(uuid.uuid4())
    body = f'{{"project": "{project.name}", "uuid": "{episode_id}", "env_id": "PickCube-v1"}}'.encode()
    status, created = post_json(live_server_url, token, "/api/episodes", body)
    assert status == 201, created
    assert created["uuid"] == episode_id and created["project"] == project.name and created["agent"] == "sim-agent-1"
    assert created["num_steps"] == 0 and created["status"] == "open" and created["env_id"] == "PickCube-v1"
    assert post_json(live_server_url, token, "/api/episodes", body)[0] == 200  # a retry: the same episode

    other = Project.objects.create(name="Other")
    moved = body.replace(project.name.encode(), b"Other")
    assert post_json(live_server_url, token, "/api/episodes", moved)[0] == 409
    status, answer = post_json(live_server_url, token, "/api/episodes", b'{"uuid": "' + episode_id.encode() + b'"}')
    assert status == 400 and answer["detail"] == "project: This field is required." and "project" in answer["errors"]
    status, answer = post_json(live_server_url, token, "/api/episodes", b"{not json")
    assert status == 400 and "JSON parse error" in answer["detail"]
    status, answer = post_json(live_server_url, token, "/api/episodes", body.replace(b"PickCube", b"Nope", 1))
    assert status == 400 and "no project with id or name 'Nope'" in answer["detail"]

    _, lacking = agent_create(name="reader", kind="sim", scopes=["labels"], projects=[project, other])
    fresh = body.replace(episode_id.encode(), str(uuid.uuid4()).encode())
    status, answer = post_json(live_server_url, lacking, "/api/episodes", fresh)
    assert status == 403 and "lacks the 'ingest' scope" in answer["detail"]

    finish = f"/api/episodes/{episode_id}/finish"
    _, neighbour = agent_create(name="neighbour", kind="sim", projects=[project])
    assert post_json(live_server_url, neighbour, finish, b"{}") == (
        403,
        {"detail": "this episode belongs to another agent"},
    )
    status, finished = post_json(live_server_url, token, finish, b'{"success": true, "metadata": {"note": "ok"}}')
    assert status == 200 and finished["status"] == "finished" and finished["success"] is True
    assert finished["metadata"] == {"note": "ok"} and finished["finished_at"]
    assert Episode.objects.get(uuid=episode_id).status == "finished"


def test_a_frame_that_cannot_be_written_leaves_no_rows_and_no_files(project, agent_token):
    import os

    from common.images.checks import check_image
    from labeling.ingest.services import StepInput, episode_create, steps_append

    episode, _ = episode_create(project=project, uuid=uuid.uuid4(), agent=agent_token[0])
    folder = f"frames/{project.pk}/{episode.uuid}"
    blocker = default_storage.path(f"{folder}/000002_extra.png")
    os.makedirs(blocker)  # a folder where step 2's file should go: opening it for writing fails
    images = {c: check_image(png_bytes(len(c)), max_side=64, max_pixels=4096) for c in ("main", "extra")}
    steps = [StepInput(index=i, images=dict(images)) for i in range(4)]
    with pytest.raises(OSError):
        steps_append(episode=episode, steps=steps)
    assert Step.objects.count() == 0 and Frame.objects.count() == 0
    assert default_storage.listdir(folder) == (["000002_extra.png"], [])  # only the blocker is left
    os.rmdir(blocker)
    assert steps_append(episode=episode, steps=steps).created == 4 and len(episode_files(str(episode.uuid))) == 8


def test_a_dropped_database_connection_costs_no_failed_chunk(uploader, episode):
    from django.db import connection

    steps, frames = chunk([0, 1])
    assert uploader.append_steps(episode, steps, frames)["created"] == 2  # a writer thread now holds a connection
    with connection.cursor() as cursor:  # as a database restart would: drop every other session
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert cursor.fetchone()[0] >= 1
    for indices in ([2, 3], [4]):
        steps, frames = chunk(indices)
        assert uploader.append_steps(episode, steps, frames)["created"] == len(indices)
    uploader.finish(episode)
    assert Step.objects.count() == 5 and Frame.objects.count() == 10 and len(episode_files(episode)) == 10


def test_the_fast_paths_episode_answer_is_the_serializers_and_carries_no_count_into_the_next(uploader, episode):
    from labeling.ingest.fastpath import _episode_data
    from labeling.ingest.serializers import EpisodeOut

    uploader.append_steps(episode, *chunk([0, 1]))
    stored = Episode.objects.select_related("project", "agent").get(uuid=episode)
    assert _episode_data(stored, num_frames=0) == EpisodeOut(stored, context={"num_frames": 0}).data
    counted = _episode_data(stored)  # the same thread's serializer: no num_frames left from the call before
    assert counted == EpisodeOut(stored).data and counted["num_frames"] == 4
