"""RLinf's own recordings import with their labels and every camera.

RLinf 0.3.0's `CollectEpisode` wrapper records a small vectorised camera env (tests/interop/side_rlinf_record.py:
2 envs with auto-reset, 5 camera views, `success` in the infos) for 6 steps, once as pickles and once as a
LeRobot dataset through RLinf's `LeRobotDatasetWriter`; the files are uploaded on the project's import page as
a user would (the pickles as they are, the LeRobot folder zipped) and the queued job is run. Each recording
holds 3 finished episodes: env 0's first (terminated after 3 steps, a success from its 2nd step on), env 1's
first (truncated after 4 steps) and env 0's second (terminated, a failure). Every frame's colour says which env,
episode, observation and camera it came from (`pixel`), so frames, views and flags are checked per frame.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from common.images.checks import decode_rgb
from labeling.imports.jobs import import_job_run, summary_from_json
from labeling.models import Episode, Frame, ImportJob, Step

from .conftest import side_run
from .side_rlinf_record import CAMERAS, TASK, H, W, pixel

CAMERA_VIEWS = ["main", "extra", "extra_1", "extra_2", "wrist"]
STEPS = 6
# project camera -> the env's view (side_rlinf_record.CAMERAS). Pickles: third_view_images is RLinf's preferred
# second view of a trend window, so it is "extra" and extra_view_images follow; RLinf's LeRobot writer records
# the main, wrist and extra views and has no column for third_view_images.
PICKLE_CAMERAS = {"main": "main", "wrist": "wrist", "extra": "third", "extra_1": "extra0", "extra_2": "extra1"}
LEROBOT_CAMERAS = {"main": "main", "wrist": "wrist", "extra": "extra0", "extra_1": "extra1"}
# (env, episode index in that env, observations in the pickle); the order RLinf finishes them in
EPISODES = [(0, 0, 4), (1, 0, 5), (0, 1, 4)]


@pytest.fixture
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = str(tmp_path / "media")
    settings.IMPORT_DIR = str(tmp_path / "imports")
    return tmp_path / "media"


@pytest.fixture
def cameras_project(project):
    project.camera_views = CAMERA_VIEWS
    project.save(update_fields=["camera_views"])
    return project


def upload_and_run(user_client, project, files: list[tuple[str, bytes]]) -> ImportJob:
    """POST the files on the import page and run the job it queued (what the Celery task calls)."""
    uploads = [SimpleUploadedFile(name, data, content_type="application/octet-stream") for name, data in files]
    response = user_client.post(f"/projects/{project.pk}/import/", {"files": uploads})
    assert response.status_code == 302, response.content[:500]
    job = ImportJob.objects.latest("pk")
    import_job_run(job.pk)
    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    return job


def colours(episode: Episode) -> dict[str, list[tuple[int, int, int]]]:
    """Each camera's stored frames, step by step, as the colour of their top-left pixel (all are [H,W])."""
    by_camera: dict[str, list[tuple[int, int, int]]] = {}
    for frame in Frame.objects.filter(step__episode=episode).order_by("step__index", "camera"):
        with frame.image.open("rb") as handle:
            array = decode_rgb(handle.read())
        assert array.shape == (H, W, 3) and (array == array[0, 0]).all()
        red, green, blue = (int(v) for v in array[0, 0])
        by_camera.setdefault(frame.camera, []).append((red, green, blue))
    return by_camera


def views(env: int, episode: int, count: int, cameras: dict[str, str]) -> dict[str, list[tuple[int, int, int]]]:
    """The colours RLinf's env gave observations 0..count-1 of `episode` of `env` on each project camera."""
    return {
        camera: [pixel(env, episode, t, CAMERAS.index(view)) for t in range(count)] for camera, view in cameras.items()
    }


@pytest.mark.django_db
def test_collect_episode_pickles_import_with_flags_and_every_camera(user_client, cameras_project, media, tmp_path):
    written = side_run(
        "record", runner="side_rlinf_record.py", root=tmp_path / "rlinf", export_format="pickle", steps=STEPS
    )
    assert written["files"] == [
        "rank_0_env_0_episode_0_step_3_success.pkl",
        "rank_0_env_0_episode_1_step_6_fail.pkl",
        "rank_0_env_1_episode_0_step_4_fail.pkl",
    ]

    job = upload_and_run(
        user_client, cameras_project, [(n, (tmp_path / "rlinf" / n).read_bytes()) for n in written["files"]]
    )

    summary = summary_from_json(job.summary)
    assert (summary.episodes, summary.steps, summary.frames, summary.failed) == (3, 13, 13 * 5, [])
    episodes = list(Episode.objects.order_by("metadata__step"))
    assert [(e.metadata["env_idx"], e.metadata["episode_id"], e.num_steps) for e in episodes] == EPISODES
    assert [e.success for e in episodes] == [True, False, False]
    assert episodes[0].metadata["task_description"] == TASK and episodes[0].metadata["cameras_dropped"] == []
    for episode, (env, index, count) in zip(episodes, EPISODES, strict=True):
        assert colours(episode) == views(env, index, count, PICKLE_CAMERAS)

    steps = [list(Step.objects.filter(episode=e).order_by("index")) for e in episodes]
    # env 0's first episode: success from its 2nd step on (info["success"]), terminated at its 3rd
    assert [s.env_success for s in steps[0]] == [False, False, True, True]
    assert [s.terminated for s in steps[0]] == [False, False, False, True]
    assert not any(s.truncated for s in steps[0])
    # env 1's: truncated at its 4th step, never a success
    assert [s.truncated for s in steps[1]] == [False, False, False, False, True]
    assert not any(s.terminated or s.env_success for s in steps[1])
    # env 0's second episode starts from the observation its auto-reset gave, with the info of that reset
    assert [s.terminated for s in steps[2]] == [False, False, False, True]
    assert not any(s.env_success for s in steps[2])
    assert steps[2][0].info["episode"] == {"success_once": False}

    assert [s.action for s in steps[0]] == [[], [0.0, 0.0], [0.5, 0.5], [1.0, 1.0]]
    assert [s.action for s in steps[2]] == [[], [1.5, 1.5], [2.0, 2.0], [2.5, 2.5]]
    assert [s.reward for s in steps[1]] == pytest.approx([0.0, 1.1, 1.2, 1.3, 1.4])
    assert [s.info["_states"] for s in steps[1]] == [[1.0, 0.0, float(t), 0.5] for t in range(5)]


@pytest.mark.django_db
def test_collect_episode_lerobot_dataset_imports_with_done_is_success_and_every_camera(
    user_client, cameras_project, media, tmp_path
):
    written = side_run(
        "record",
        side="lerobot",
        runner="side_rlinf_record.py",
        root=tmp_path / "rlinf",
        export_format="lerobot",
        steps=STEPS,
    )
    assert written["codebase_version"] == "v3.0"
    assert {"done", "is_success", "actions", "state", "image", "wrist_image", "extra_view_image-0"} <= set(
        written["features"]
    )
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted((tmp_path / "rlinf").rglob("*")):
            if path.is_file():
                zipped.write(path, path.relative_to(tmp_path))

    job = upload_and_run(user_client, cameras_project, [("rlinf_collect.zip", archive.getvalue())])

    summary = summary_from_json(job.summary)
    # LeRobot frames pair observation i with action i: one frame fewer than the pickle's observations
    assert (summary.episodes, summary.steps, summary.frames, summary.failed) == (3, 10, 10 * 4, [])
    episodes = list(Episode.objects.order_by("metadata__episode_index"))
    assert [e.num_steps for e in episodes] == [count - 1 for _, _, count in EPISODES]
    assert [e.success for e in episodes] == [True, False, False]
    assert episodes[0].metadata["success_column"] == "is_success"
    # RLinf's LeRobot writer records the main, wrist and extra views; it has no column for third_view_images
    mapping = {"image": "main", "wrist_image": "wrist", "extra_view_image-0": "extra", "extra_view_image-1": "extra_1"}
    assert episodes[0].metadata["cameras"] == mapping and episodes[0].metadata["cameras_dropped"] == []
    for episode, (env, index, count) in zip(episodes, EPISODES, strict=True):
        assert colours(episode) == views(env, index, count - 1, LEROBOT_CAMERAS)

    for episode, (env, index, count) in zip(episodes, EPISODES, strict=True):
        steps = list(Step.objects.filter(episode=episode).order_by("index"))
        # `done` on the last frame only; `is_success` (the episode's outcome) on every frame
        assert [s.terminated for s in steps] == [i == count - 2 for i in range(count - 1)]
        assert [s.info["is_success"] for s in steps] == [episode.success] * (count - 1)
        assert not any(s.env_success or s.truncated for s in steps)
        assert [s.info["state"] for s in steps] == [[float(env), float(index), float(t), 0.5] for t in range(count - 1)]
        assert all(s.info["intervene_flag"] is False and s.info["segment_id"] == 0 for s in steps)
    last = list(Step.objects.filter(episode=episodes[2]).order_by("index"))
    assert [s.action for s in last] == [[1.5, 1.5], [2.0, 2.0], [2.5, 2.5]]
    assert episodes[0].metadata["fps"] == 10.0
