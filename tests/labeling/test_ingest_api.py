"""The ingest API against PostgreSQL: create, append in chunks, retry, finish."""

from __future__ import annotations

import base64
import uuid

import numpy as np
import pytest
from django.core.files.storage import default_storage

from common.images.checks import decode_rgb
from labeling.models import Episode, Frame, Step

from .ingest_helpers import multipart_chunk, npy_bytes, png_bytes

pytestmark = pytest.mark.django_db


def create_episode(api, project, episode_id=None, **extra):
    body = {"project": project.name, "uuid": str(episode_id or uuid.uuid4()), "env_id": "PickCube-v1", **extra}
    return api.post("/api/episodes", body, format="json")


def test_an_agent_uploads_an_episode_in_chunks_and_finishes_it(agent_client, agent_token, project):
    response = create_episode(agent_client, project)
    assert response.status_code == 201, response.content
    episode_id = response.json()["uuid"]
    assert response.json()["agent"] == agent_token[0].name

    for chunk in ([0, 1, 2], [3, 4]):
        response = agent_client.post(f"/api/episodes/{episode_id}/steps", multipart_chunk(chunk), format="multipart")
        assert response.status_code == 200, response.content
        assert response.json()["created"] == len(chunk)

    response = agent_client.post(f"/api/episodes/{episode_id}/finish", {}, format="json")
    assert response.status_code == 200
    episode = Episode.objects.get(uuid=episode_id)
    assert episode.status == "finished" and episode.num_steps == 5
    assert episode.success is True  # steps 3 and 4 report env success
    steps = list(episode.steps.order_by("index"))
    assert [s.index for s in steps] == [0, 1, 2, 3, 4]
    assert steps[2].action == pytest.approx([0.2, -0.1]) and steps[2].reward == pytest.approx(0.2)
    assert steps[2].info == {"k": 2} and steps[4].env_success
    frame = Frame.objects.get(step=steps[1], camera="extra")
    with default_storage.open(frame.image.name, "rb") as handle:
        assert handle.read() == png_bytes(1 * 10 + len("extra"))


def test_retrying_every_call_never_duplicates(agent_client, project):
    episode_id = uuid.uuid4()
    assert create_episode(agent_client, project, episode_id).status_code == 201
    assert create_episode(agent_client, project, episode_id).status_code == 200
    url = f"/api/episodes/{episode_id}/steps"
    assert agent_client.post(url, multipart_chunk([0, 1]), format="multipart").json()["created"] == 2
    retry = agent_client.post(url, multipart_chunk([0, 1]), format="multipart").json()
    assert retry == {"created": 0, "skipped": 2, "num_steps": 2}
    overlapping = agent_client.post(url, multipart_chunk([1, 2]), format="multipart").json()
    assert overlapping == {"created": 1, "skipped": 1, "num_steps": 3}
    agent_client.post(f"/api/episodes/{episode_id}/finish", {}, format="json")
    assert agent_client.post(f"/api/episodes/{episode_id}/finish", {}, format="json").status_code == 200
    # A retried chunk after finishing is still accepted as a no-op.
    assert agent_client.post(url, multipart_chunk([2]), format="multipart").json()["created"] == 0

    assert Episode.objects.count() == 1
    assert Step.objects.count() == 3
    assert Frame.objects.count() == 6
    assert len(default_storage.listdir(f"frames/{project.pk}/{episode_id}")[1]) == 6


def test_json_chunks_take_base64_png_and_raw_uint8_arrays(agent_client, project):
    episode_id = create_episode(agent_client, project).json()["uuid"]
    raw = np.arange(16 * 24 * 3, dtype=np.uint8).reshape(16, 24, 3)
    body = {
        "steps": [
            {
                "index": 0,
                "reward": 1.5,
                "images": {
                    "main": base64.b64encode(png_bytes(7)).decode(),
                    "extra": base64.b64encode(npy_bytes(raw)).decode(),
                },
            }
        ]
    }
    response = agent_client.post(f"/api/episodes/{episode_id}/steps", body, format="json")
    assert response.status_code == 200, response.content
    frame = Frame.objects.get(camera="extra")
    assert (frame.width, frame.height) == (24, 16)
    with default_storage.open(frame.image.name, "rb") as handle:
        assert np.array_equal(decode_rgb(handle.read()), raw)


def test_people_with_a_session_may_use_the_api_too(user_client, project):
    response = user_client.post(
        "/api/episodes", {"project": str(project.pk), "uuid": str(uuid.uuid4())}, content_type="application/json"
    )
    assert response.status_code == 201
    assert Episode.objects.get().agent is None


def test_an_episode_id_cannot_move_to_another_project(agent_client, project):
    from projects.models import Project

    other = Project.objects.create(name="Other")
    episode_id = uuid.uuid4()
    create_episode(agent_client, project, episode_id)
    response = create_episode(agent_client, other, episode_id)
    assert response.status_code == 409
    assert "another project" in response.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_a_finished_episode_gets_its_proposals_from_a_real_worker(agent_client, project, celery_worker_process):
    import time

    from labeling.models import FrameLabel

    episode_id = create_episode(agent_client, project).json()["uuid"]
    agent_client.post(f"/api/episodes/{episode_id}/steps", multipart_chunk([0, 1, 2, 3, 4]), format="multipart")
    agent_client.post(f"/api/episodes/{episode_id}/finish", {}, format="json")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not FrameLabel.objects.filter(source="proposal").exists():
        time.sleep(0.2)
    proposals = dict(FrameLabel.objects.filter(source="proposal").values_list("step__index", "value"))
    assert proposals == {0: "fail", 1: "fail", 2: "fail", 3: "success", 4: "success"}


def test_queuing_a_finished_episodes_proposals_subscribes_to_no_result_channel():
    import redis
    from django.conf import settings

    from labeling.tasks import generate_episode_proposals

    queued = generate_episode_proposals.delay(0)  # no episode 0: a worker that takes it finds nothing to do
    client = redis.Redis.from_url(settings.CELERY_RESULT_BACKEND)
    try:
        [(_, subscribers)] = client.pubsub_numsub(f"celery-task-meta-{queued.id}")
    finally:
        client.close()
    assert subscribers == 0  # the result backend would otherwise hold one channel per finished episode
