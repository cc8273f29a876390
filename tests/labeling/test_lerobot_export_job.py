"""The LeRobot export as a background job (the project page's button): POST answers 202 at once with its
progress and download URLs, the job counts the episodes it writes, the download is the same dataset as the
synchronous GET's, and every wrong turn answers a clear 4xx."""

from __future__ import annotations

import io
import zipfile

import pytest

from labeling.imports.lerobot.export_jobs import export_job_run
from projects.models import Membership, Project
from tests.labeling import test_lerobot_round_trip as round_trip
from tests.labeling.test_lerobot_import import media  # noqa: F401  (the fixture: MEDIA_ROOT and IMPORT_DIR in tmp_path)

labeled = round_trip.labeled  # the fixture: a project with two labeled episodes
pytestmark = pytest.mark.usefixtures("media")


def _names(archive: bytes) -> list[str]:
    return sorted(zipfile.ZipFile(io.BytesIO(archive)).namelist())


@pytest.mark.django_db
def test_a_background_export_answers_at_once_counts_episodes_and_downloads_the_dataset(user_client, labeled):
    started = user_client.post(f"/projects/{labeled.pk}/export/lerobot/", {"fps": "5"})
    assert started.status_code == 202
    job = started.json()
    assert (job["status"], job["done"], job["total"]) == ("queued", 0, 2)
    assert user_client.get(job["download_url"]).status_code == 409  # not written yet
    token = job["status_url"].rstrip("/").rsplit("/", 1)[-1]

    assert export_job_run(token) == "succeeded"
    assert export_job_run(token) == "succeeded"  # run again (a second delivery): left as it is
    state = user_client.get(job["status_url"]).json()
    assert state == {"status": "succeeded", "done": 2, "total": 2, "percent": 100, "error": ""}
    download = user_client.get(job["download_url"])
    assert download.status_code == 200 and download["Content-Type"] == "application/zip"
    archive = b"".join(download.streaming_content)
    synchronous = b"".join(user_client.get(f"/projects/{labeled.pk}/export/lerobot/").streaming_content)
    assert _names(archive) == _names(synchronous) and "meta/info.json" in _names(archive)
    assert b'"fps": 5' in zipfile.ZipFile(io.BytesIO(archive)).read("meta/info.json")


@pytest.mark.django_db
def test_export_jobs_refuse_what_they_cannot_do_with_a_clear_4xx(user_client, labeled, user):
    empty = Project.objects.create(name="Empty", camera_views=["main"])
    Membership.objects.create(project=empty, user=user, role=Membership.Role.MANAGER)
    nothing = user_client.post(f"/projects/{empty.pk}/export/lerobot/")
    assert nothing.status_code == 400 and "no finished episodes" in nothing.json()["detail"]
    assert user_client.post(f"/projects/{labeled.pk}/export/lerobot/", {"fps": "0"}).status_code == 400
    assert user_client.get(f"/projects/{labeled.pk}/export/lerobot/nope/").status_code == 404
    job = user_client.post(f"/projects/{labeled.pk}/export/lerobot/").json()
    other = job["status_url"].replace(f"/projects/{labeled.pk}/", f"/projects/{empty.pk}/")
    assert user_client.get(other).status_code == 404  # a token is only good for its own project
    assert user_client.get(f"/projects/{labeled.pk}/export/lerobot/nope/download").status_code == 404


@pytest.mark.django_db
def test_exports_older_than_their_state_are_removed_when_another_export_runs(user_client, labeled):
    import os
    import time

    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    from labeling.imports.lerobot.export_jobs import EXPORT_JOB_TTL_S, export_file_name, exports_expired_remove

    old = default_storage.save(export_file_name("old"), ContentFile(b"zip"))
    two_hours_ago = time.time() - 2 * EXPORT_JOB_TTL_S
    os.utime(default_storage.path(old), (two_hours_ago, two_hours_ago))
    fresh = default_storage.save(export_file_name("fresh"), ContentFile(b"zip"))
    assert exports_expired_remove() == 1
    assert not default_storage.exists(old) and default_storage.exists(fresh)
    job = user_client.post(f"/projects/{labeled.pk}/export/lerobot/").json()
    token = job["status_url"].rstrip("/").rsplit("/", 1)[-1]
    assert export_job_run(token) == "succeeded" and default_storage.exists(export_file_name(token))
