"""Imports as Celery jobs: a real worker imports the stored upload, good files land and bombs fail named."""

from __future__ import annotations

import pickle
import resource
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from labeling.imports.jobs import memory_limit
from labeling.models import Episode, ImportJob
from projects.models import Membership
from tests.labeling import pickle_bombs
from tests.labeling.import_builders import rlinf_episode


def test_memory_limit_turns_a_huge_allocation_into_memory_error_and_is_restored():
    before = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(MemoryError), memory_limit(64 * 1024 * 1024):
        bytearray(4 * 1024**3)
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert len(bytearray(256 * 1024 * 1024)) == 256 * 1024 * 1024  # the cap is gone again


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_upload_is_imported_by_a_worker_while_the_page_shows_progress(
    client, django_user_model, project, celery_worker_process
):
    importer = django_user_model.objects.create_user("importer", password="pw-importer-1")
    Membership.objects.create(project=project, user=importer, role=Membership.Role.MANAGER)  # imports need it
    client.force_login(importer)
    files = [
        SimpleUploadedFile("rank_0_env_0_episode_5_success.pkl", pickle.dumps(rlinf_episode(num_actions=2))),
        SimpleUploadedFile("rank_0_env_0_episode_6_success.pkl", pickle_bombs.bytearray_bomb()),
    ]
    response = client.post(f"/projects/{project.pk}/import/", {"files": files})
    assert response.status_code == 302
    job = ImportJob.objects.get()
    page = client.get(response["Location"])
    assert b"<progress" in page.content

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.finished:
            break
        time.sleep(0.5)
    assert job.status == "succeeded", (job.status, job.error)
    assert (job.done, job.total, job.summary["episodes"]) == (2, 2, 1)
    assert "refusing bytearray" in job.summary["failed"][0][1]
    assert Episode.objects.filter(project=project).count() == 1
    page = client.get(response["Location"])
    assert b'http-equiv="refresh"' not in page.content and b"refusing bytearray" in page.content
