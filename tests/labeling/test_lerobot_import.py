"""LeRobot datasets and mp4 episodes in (import_paths, the import page's job) and out (export_lerobot, the
export URL). Datasets here come from lerobot_builders (LeRobot's published v2.1 layout) and from our own v3.0
export; tests/interop/test_lerobot_dataset.py does the same with datasets LeRobot's own code writes and reads."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command

from labeling.imports.jobs import import_job_run
from labeling.imports.lerobot.format import camera_name
from labeling.imports.services import import_paths
from labeling.models import Episode, FrameLabel, ImportJob, Step
from projects.models import Project
from tests.labeling.lerobot_builders import close, first_pixels, pixel, solid_frames, write_mp4, write_v21_dataset


@pytest.fixture
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = str(tmp_path / "media")
    settings.IMPORT_DIR = str(tmp_path / "imports")
    return tmp_path / "media"


def assert_close(got: list[int], want: list[int]) -> None:
    assert close(got, want), (got, want)


@pytest.mark.django_db
def test_a_v21_dataset_imports_its_episodes_cameras_and_success_columns(project, media, tmp_path):
    root = write_v21_dataset(tmp_path / "so100_stack", lengths=[3, 4], cameras=["front", "wrist"])

    summary = import_paths(project=project, paths=[root], env_id="SO100")

    assert (summary.episodes, summary.steps, summary.frames, summary.failed) == (2, 7, 14, [])
    first, second = Episode.objects.order_by("metadata__episode_index")
    assert first.metadata["cameras"] == {"observation.images.front": "main", "observation.images.wrist": "extra"}
    assert first.metadata["format"] == "lerobot_v2.1" and first.metadata["task_description"] == "stack the cubes"
    assert (first.success, second.success, first.num_steps, second.num_steps) == (True, False, 3, 4)
    steps = list(Step.objects.filter(episode=first).order_by("index"))
    assert [s.env_success for s in steps] == [False, False, True] and [s.reward for s in steps] == [0.0, 0.0, 1.0]
    assert [s.terminated for s in steps] == [False, False, True] and steps[2].action == [2.0, -2.0]
    assert_close(first_pixels(second, "main"), [pixel(1, i, 0) for i in range(4)])
    assert_close(first_pixels(second, "extra"), [pixel(1, i, 1) for i in range(4)])
    assert FrameLabel.objects.count() == 0  # success columns are env success, not labels

    again = import_paths(project=project, paths=[root])
    assert again.episodes == 0 and len(again.already_imported) == 2


@pytest.mark.django_db
def test_image_features_in_the_parquet_rows_import_too(project, media, tmp_path):
    root = write_v21_dataset(tmp_path / "pngs", lengths=[2], cameras=["main"], dtype="image")

    summary = import_paths(project=project, paths=[root])

    assert (summary.episodes, summary.frames, summary.failed) == (1, 2, [])
    assert first_pixels(Episode.objects.get(), "main") == [pixel(0, 0, 0), pixel(0, 1, 0)]  # PNG: exact


@pytest.mark.django_db
def test_a_zipped_dataset_uploads_through_the_import_page(user_client, project, media, tmp_path):
    root = write_v21_dataset(tmp_path / "aloha_sim", lengths=[2, 3], cameras=["top"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(root.parent).as_posix())
    upload = SimpleUploadedFile("aloha_sim.zip", buffer.getvalue())

    assert user_client.post(f"/projects/{project.pk}/import/", {"files": [upload]}).status_code == 302
    job = import_job_run(ImportJob.objects.latest("pk").pk)
    assert job is not None

    assert job.status == "succeeded" and (job.summary["episodes"], job.summary["steps"]) == (2, 5), job.summary
    page = user_client.get(f"/projects/{project.pk}/import/{job.pk}/").content.decode()
    assert '<td id="summary-episodes">2</td><td id="summary-steps">5</td>' in page


@pytest.mark.django_db
def test_export_writes_labels_as_columns_and_imports_back(project, media, tmp_path, user):
    import_paths(project=project, paths=[write_v21_dataset(tmp_path / "ds", lengths=[3, 2], cameras=["front"])])
    first = Episode.objects.get(metadata__episode_index=0)
    step_ids = list(Step.objects.filter(episode=first).order_by("index").values_list("id", flat=True))
    for step_id, value in zip(step_ids, ["fail", "fail", "success"], strict=True):
        FrameLabel.objects.create(project=project, episode=first, step_id=step_id, value=value, author=user)

    out = tmp_path / "export"
    call_command("export_lerobot", str(out), "--project", project.name, "--fps", "15", stdout=io.StringIO())

    info = json.loads((out / "meta" / "info.json").read_text())
    assert (info["codebase_version"], info["total_episodes"], info["total_frames"], info["fps"]) == ("v3.0", 2, 5, 15)
    data = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet").to_pydict()
    assert data["label"] == [0, 0, 1] and data["next.success"] == [False, False, True]
    assert data["next.reward"] == [0.0, 0.0, 1.0] and data["env.success"] == [False, False, True]
    assert pq.read_table(out / "data" / "chunk-000" / "file-001.parquet").to_pydict()["label"] == [-1, -1]
    assert [round(a[0]) for a in data["action"]] == [0, 1, 2]

    other = Project.objects.create(name="Copy", camera_views=["front", "main"])
    summary = import_paths(project=other, paths=[out])
    assert (summary.episodes, summary.steps, summary.failed) == (2, 5, [])
    copy = Episode.objects.get(project=other, metadata__episode_index=0)
    assert copy.metadata["cameras"] == {"observation.images.main": "main"}  # the export keeps camera names
    assert [s.env_success for s in Step.objects.filter(episode=copy).order_by("index")] == [False, False, True]
    assert_close(first_pixels(copy, "main"), [pixel(0, i, 0) for i in range(3)])


@pytest.mark.django_db
def test_mp4_uploads_become_episodes_one_video_per_camera(user_client, project, media, tmp_path):
    files = {
        "pour.main.mp4": write_mp4(tmp_path / "a" / "pour.main.mp4", solid_frames(0, 4, 0)),
        "pour.extra.mp4": write_mp4(tmp_path / "b" / "pour.extra.mp4", solid_frames(0, 3, 1)),
        "solo.mp4": write_mp4(tmp_path / "c" / "solo.mp4", solid_frames(2, 2)),
    }
    uploads = [SimpleUploadedFile(name, path.read_bytes()) for name, path in files.items()]
    response = user_client.post(f"/projects/{project.pk}/import/", {"files": uploads})
    assert response.status_code == 302, response.content[:500]
    job = import_job_run(ImportJob.objects.latest("pk").pk)
    assert job is not None

    assert job.status == "succeeded" and job.summary["failed"] == [], job.summary
    pour = Episode.objects.get(metadata__files__main="pour.main.mp4")
    assert pour.num_steps == 4 and pour.metadata["frames"] == {"main": 4, "extra": 3}
    assert_close(first_pixels(pour, "main"), [pixel(0, i, 0) for i in range(4)])
    assert_close(first_pixels(pour, "extra"), [pixel(0, i, 1) for i in range(3)])
    solo = Episode.objects.get(metadata__files__main="solo.mp4")
    assert solo.num_steps == 2 and solo.success is None


@pytest.mark.django_db
def test_bad_videos_and_datasets_fail_with_the_reason_and_store_nothing(project, media, tmp_path, settings):
    (tmp_path / "junk.mp4").write_bytes(b"not a video at all" * 10)
    write_mp4(tmp_path / "long" / "long.mp4", solid_frames(0, 5))
    write_mp4(tmp_path / "cams" / "x.wrist.mp4", solid_frames(0, 2))
    old = tmp_path / "old"
    (old / "meta").mkdir(parents=True)
    (old / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v1.6", "fps": 10, "features": {}}))
    escape = write_v21_dataset(tmp_path / "escape", lengths=[2], cameras=["front"])
    info = json.loads((escape / "meta" / "info.json").read_text())
    (escape / "meta" / "info.json").write_text(json.dumps(info | {"data_path": "../../{episode_index}.parquet"}))
    settings.VIDEO_MAX_FRAMES = 4

    summary = import_paths(
        project=project,
        paths=[tmp_path / "junk.mp4", tmp_path / "long", tmp_path / "cams", old, escape],
    )

    reasons = dict(summary.failed)
    assert "not a readable video" in reasons["junk"]
    assert "more than 4 frames" in reasons["long/long"]
    assert "no camera 'wrist'" in reasons["cams/x"]
    assert "v1.6 is not supported" in reasons["old"]
    assert "points outside the dataset" in reasons["escape"]
    assert summary.episodes == 0 and Episode.objects.count() == 0 and not list(media.rglob("*.png"))

    settings.VIDEO_MAX_FRAMES, settings.MAX_IMAGE_SIDE = 100, 32
    assert "over the limits" in dict(import_paths(project=project, paths=[tmp_path / "long"]).failed)["long/long"]


@pytest.mark.django_db
def test_export_url_sends_a_zip_and_refuses_what_it_cannot_make(user_client, project, media, tmp_path, settings):
    page = user_client.get(f"/projects/{project.pk}/").content.decode()
    assert f'href="/projects/{project.pk}/export/lerobot/">Export LeRobot dataset</a>' in page
    assert user_client.get(f"/projects/{project.pk}/export/lerobot/").status_code == 400  # no episodes yet
    import_paths(project=project, paths=[write_v21_dataset(tmp_path / "ds", lengths=[2, 2], cameras=["front"])])

    response = user_client.get(f"/projects/{project.pk}/export/lerobot/?fps=5")
    assert response.status_code == 200 and response["Content-Disposition"].endswith('pickcube-lerobot.zip"')
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert json.loads(archive.read("meta/info.json"))["total_frames"] == 4
    assert "videos/observation.images.main/chunk-000/file-001.mp4" in archive.namelist()

    assert user_client.get(f"/projects/{project.pk}/export/lerobot/?fps=0").status_code == 400
    settings.LEROBOT_EXPORT_MAX_FRAMES = 3
    refused = user_client.get(f"/projects/{project.pk}/export/lerobot/")
    assert refused.status_code == 400 and b"LEROBOT_EXPORT_MAX_FRAMES" in refused.content
    other = Project.objects.create(name="Not mine")
    assert user_client.get(f"/projects/{other.pk}/export/lerobot/").status_code == 404


def test_camera_names_of_lerobot_and_rlinf_keys():
    # RLinf's CollectEpisode keys get the names its pickles' cameras get on import (labeling/imports/rlinf_episode.py)
    rlinf = {"image": "main", "wrist_image": "wrist", "extra_view_image": "extra", "extra_view_image-0": "extra"}
    rlinf |= {"extra_view_image-2": "extra_2", "wrist_image-1": "wrist_1", "extra_view_image-x": "extra_view_image-x"}
    lerobot = {"observation.images.front": "front", "observation.image": "image"}
    assert {key: camera_name(key) for key in rlinf | lerobot} == rlinf | lerobot
