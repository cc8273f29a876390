"""The upload form at /projects/<pk>/import/ and the job page it sends the browser to.

The upload is stored and queued; here the queued job is run in-process (`import_job_run`, what the
Celery task calls) and the job page is read; tests/labeling/test_import_jobs.py runs it on a real worker."""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from django.core.files.uploadedfile import SimpleUploadedFile

from labeling.imports.jobs import import_job_run
from labeling.models import Episode, FrameLabel, ImportJob, Step
from tests.labeling.import_builders import RunsShell, image, png_bytes, reward_payload, rlinf_episode

NAME = "rank_0_env_1_episode_2_step_30_success.pkl"


@pytest.fixture
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = str(tmp_path / "media")
    settings.IMPORT_DIR = str(tmp_path / "imports")
    return tmp_path / "media"


def import_and_show(user_client, project, data: dict):
    """POST the upload (answered at once with a redirect), run the queued job, then GET its page."""
    response = user_client.post(url(project), data)
    assert response.status_code == 302, response.content[:500]
    job = ImportJob.objects.latest("pk")
    assert response["Location"] == f"/projects/{project.pk}/import/{job.pk}/"
    assert job.status == "queued" and Path(job.folder).is_dir()
    import_job_run(job.pk)
    assert not Path(job.folder).exists()  # the stored upload is removed once imported
    return user_client.get(response["Location"])


def url(project) -> str:
    return f"/projects/{project.pk}/import/"


def upload(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


def zip_of(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.django_db
def test_anonymous_users_are_sent_to_login(client, project, media):
    blob = pickle.dumps(rlinf_episode(num_actions=2))
    for response in (client.get(url(project)), client.post(url(project), {"files": upload(NAME, blob)})):
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert not Episode.objects.exists()


@pytest.mark.django_db
def test_page_shows_the_form(user_client, project):
    response = user_client.get(url(project))
    assert response.status_code == 200
    assert b'enctype="multipart/form-data"' in response.content and b"Import into PickCube" in response.content


@pytest.mark.django_db
def test_uploading_a_pickle_and_a_payload_shows_the_summary(user_client, project, media):
    payload = io.BytesIO()
    torch.save(reward_payload([0, 1]), payload)
    files = [upload(NAME, pickle.dumps(rlinf_episode(num_actions=2))), upload("train.pt", payload.getvalue())]

    response = import_and_show(user_client, project, {"files": files, "env_id": "PickCube-v1"})

    assert response.status_code == 200
    assert b'value="100"' in response.content and b"2 of 2 file(s)" in response.content
    summary = response.context["summary"]
    assert (summary.episodes, summary.steps, summary.frames, summary.labels) == (2, 5, 8, 2)
    assert b'id="summary-episodes">2<' in response.content
    episode = Episode.objects.get(metadata__format="rlinf_pickle")
    assert episode.env_id == "PickCube-v1" and episode.metadata["file_name"] == NAME
    assert Step.objects.filter(episode=episode).count() == 3

    again = import_and_show(user_client, project, {"files": [upload(NAME, pickle.dumps(rlinf_episode(num_actions=2)))]})
    assert again.status_code == 200 and b"already imported as episode" in again.content
    assert Episode.objects.count() == 2


@pytest.mark.django_db
def test_a_job_another_runner_claimed_is_left_to_it(user_client, project, media):
    response = user_client.post(url(project), {"files": [upload(NAME, pickle.dumps(rlinf_episode(num_actions=2)))]})
    assert response.status_code == 302
    job = ImportJob.objects.latest("pk")
    ImportJob.objects.filter(pk=job.pk).update(status="running")  # a worker has it

    assert import_job_run(job.pk).status == "running"  # left as it is
    assert Path(job.folder).is_dir() and not Episode.objects.exists()  # its files are the worker's to import
    ImportJob.objects.filter(pk=job.pk).update(status="queued")
    assert import_job_run(job.pk).status == "succeeded" and Episode.objects.count() == 1
    assert import_job_run(job.pk).status == "succeeded" and Episode.objects.count() == 1  # once


@pytest.mark.django_db
def test_uploading_a_zip_of_label_folders(user_client, project, media):
    data = zip_of(
        {
            "run1/success/f_1.png": png_bytes(image(1)),
            "run1/failure/f_1.png": png_bytes(image(2)),
            "run1/failure/f_2.png": png_bytes(image(3)),
        }
    )

    response = import_and_show(user_client, project, {"files": upload("frames.zip", data)})

    assert response.status_code == 200
    assert response.context["summary"].labels == 3
    values = sorted(FrameLabel.objects.values_list("value", "params__imported_from"))
    assert values == [
        ("fail", "frames/run1/failure"),
        ("fail", "frames/run1/failure"),
        ("success", "frames/run1/success"),
    ]


@pytest.mark.django_db
def test_malicious_pickle_upload_is_refused_with_a_message(user_client, project, media, tmp_path):
    marker = tmp_path / "pwned"
    data = rlinf_episode(num_actions=2)
    data["observations"][0]["payload"] = RunsShell(marker)

    response = import_and_show(user_client, project, {"files": upload(NAME, pickle.dumps(data))})

    assert b"Import finished with problems" in response.content
    assert b"refusing to load posix.system" in response.content
    assert not marker.exists() and not Episode.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name, data, message",
    [
        ("notes.txt", b"hello", b"notes.txt: unsupported file type"),
        ("evil.zip", zip_of({"../outside.pkl": b"x"}), b"points outside the archive"),
        ("broken.zip", b"PK\x03\x04 not a zip", b"not a readable zip file"),
        ("train.pt", b"garbage", b"unreadable .pt file"),
        ("empty.zip", zip_of({"readme.txt": b"x"}), b"nothing to import"),
    ],
)
def test_bad_uploads_get_a_clear_error_and_change_nothing(user_client, project, media, name, data, message):
    if name.endswith(".txt"):  # refused by the form itself
        response = user_client.post(url(project), {"files": upload(name, data)})
        assert response.status_code == 400 and not ImportJob.objects.exists()
    else:  # found out by the import job
        response = import_and_show(user_client, project, {"files": upload(name, data)})
        assert b"Import finished with problems" in response.content
    assert message in response.content
    assert not Episode.objects.exists()


@pytest.mark.django_db
def test_unknown_project_is_404(user_client):
    assert user_client.get("/projects/999999/import/").status_code == 404
