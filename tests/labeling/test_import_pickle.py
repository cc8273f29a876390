"""Importing RLinf episode pickles: steps, frames, flags, idempotency, refusals, atomicity.

The pickles are our own builder's (tests/labeling/import_builders.py `rlinf_episode`), so that each case can be
made on demand; pickles written by RLinf 0.3.0's own `CollectEpisode` are imported in
tests/interop/test_rlinf_recordings.py."""

from __future__ import annotations

import pickle
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from common.images.checks import decode_rgb
from labeling.imports.services import import_paths
from labeling.models import Episode, Frame, FrameLabel, Step
from tests.labeling.import_builders import (
    RunsShell,
    TorchStorageAttack,
    expected_step_success,
    image,
    rlinf_episode,
    write_pickle,
)

NAME = "rank_0_env_3_episode_7_step_1200_success.pkl"


@pytest.fixture
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"


def stored_files(media: Path) -> list[Path]:
    return [path for path in media.rglob("*") if path.is_file()] if media.exists() else []


@pytest.mark.django_db
@pytest.mark.parametrize("use_torch", [False, True], ids=["numpy", "torch"])
def test_pickle_imports_as_one_episode_with_n_plus_one_steps(project, media, tmp_path, use_torch):
    path = write_pickle(tmp_path / NAME, rlinf_episode(num_actions=4, use_torch=use_torch, gae=True))

    summary = import_paths(project=project, paths=[path])

    assert (summary.episodes, summary.steps, summary.frames, summary.labels) == (1, 5, 10, 0)
    assert summary.failed == []
    episode = Episode.objects.get(project=project)
    assert episode.source == "import" and episode.status == "finished" and episode.success is True
    assert episode.num_steps == 5
    assert episode.metadata["file_name"] == NAME
    assert (episode.metadata["rank"], episode.metadata["env_idx"], episode.metadata["episode_id"]) == (0, 3, 7)
    assert episode.metadata["step"] == 1200 and episode.metadata["task_description"] == "pick up the red cube"
    steps = list(Step.objects.filter(episode=episode).order_by("index"))
    assert [s.index for s in steps] == [0, 1, 2, 3, 4]
    assert [s.reward for s in steps] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [s.env_success for s in steps] == expected_step_success(4)
    assert [s.terminated for s in steps] == [False, False, False, False, True]
    assert [s.score for s in steps] == pytest.approx([1.0, 0.9, 0.8, 0.7, 0.6])
    assert steps[0].action == [] and steps[4].action == pytest.approx([0.3] * 7)
    assert steps[2].info["episode"] == {"success_once": True}
    for step in steps:
        frames = {f.camera: f for f in step.frames.all()}
        assert set(frames) == {"main", "extra"}
        with frames["main"].image.open("rb") as handle:
            np.testing.assert_array_equal(decode_rgb(handle.read()), image(100 + step.index))
        with frames["extra"].image.open("rb") as handle:
            np.testing.assert_array_equal(decode_rgb(handle.read()), image(200 + 10 * step.index))
    assert not FrameLabel.objects.exists()  # proposals are the labeler's job


@pytest.mark.django_db
def test_reimporting_the_same_file_changes_nothing(project, media, tmp_path):
    path = write_pickle(tmp_path / NAME, rlinf_episode(num_actions=3))
    import_paths(project=project, paths=[path])
    files = stored_files(media)

    renamed = tmp_path / "copy.pkl"
    renamed.write_bytes(path.read_bytes())
    summary = import_paths(project=project, paths=[path, renamed])

    assert summary.episodes == 0 and len(summary.already_imported) == 2
    assert "already imported" in summary.already_imported[0][1]
    assert Episode.objects.count() == 1 and Step.objects.count() == 4 and Frame.objects.count() == 8
    assert stored_files(media) == files


@pytest.mark.django_db
def test_failed_episode_without_gae_and_cameras_the_project_lacks(project, media, tmp_path):
    project.camera_views = ["main"]
    project.save()
    path = write_pickle(tmp_path / "rank_1_env_0_episode_2_fail.pkl", rlinf_episode(num_actions=2, success=False))

    import_paths(project=project, paths=[path])

    episode = Episode.objects.get()
    assert episode.success is False and episode.metadata["score_source"] == "rewards"
    assert episode.metadata["cameras_dropped"] == ["extra"]
    assert set(Frame.objects.values_list("camera", flat=True)) == {"main"}
    assert all(score is None for score in Step.objects.values_list("score", flat=True))


@pytest.mark.django_db
@pytest.mark.parametrize("attack", [RunsShell, TorchStorageAttack], ids=["os.system", "torch-storage"])
def test_malicious_pickle_is_refused_by_the_command_and_never_runs(project, media, tmp_path, attack):
    marker = tmp_path / "pwned"
    data = rlinf_episode(num_actions=2)
    data["infos"][1]["payload"] = attack(marker)
    path = tmp_path / NAME
    path.write_bytes(pickle.dumps(data, protocol=4))
    out = StringIO()

    with pytest.raises(CommandError, match="1 file.* could not be imported"):
        call_command("import_episodes", str(path), project=project.name, no_progress=True, stdout=out)

    assert not marker.exists()
    assert f"{NAME}: refusing" in out.getvalue()
    assert not Episode.objects.exists() and stored_files(media) == []


@pytest.mark.django_db
def test_bad_frame_in_the_last_step_leaves_nothing_behind(project, media, tmp_path, settings):
    settings.MAX_IMAGE_SIDE = 20
    data = rlinf_episode(num_actions=40)  # more steps than one chunk: earlier chunks are stored first
    data["observations"][40]["main_images"] = np.zeros((32, 16, 3), np.uint8)
    path = write_pickle(tmp_path / NAME, data)

    summary = import_paths(project=project, paths=[path])

    assert summary.episodes == 0
    assert summary.failed == [
        (NAME, "step 40 camera main: image is 16x32; the limit is 20 px a side and 4194304 pixels")
    ]
    assert not Episode.objects.exists() and not Step.objects.exists() and not Frame.objects.exists()
    assert stored_files(media) == []


@pytest.mark.django_db
def test_one_bad_file_in_a_folder_does_not_stop_the_others(project, media, tmp_path):
    folder = tmp_path / "episodes"
    folder.mkdir()
    write_pickle(folder / NAME, rlinf_episode(num_actions=2))
    (folder / "rank_0_env_0_episode_1_fail.pkl").write_bytes(b"\x80\x04not really")
    short = rlinf_episode(num_actions=2)
    short["rewards"].pop()
    write_pickle(folder / "rank_0_env_0_episode_2_fail.pkl", short)
    (folder / "notes.txt").write_text("hello")

    summary = import_paths(project=project, paths=[folder])

    assert summary.episodes == 1
    reasons = dict(summary.skipped)
    assert reasons["episodes/rank_0_env_0_episode_1_fail.pkl"].startswith("unreadable pickle")
    assert (
        reasons["episodes/rank_0_env_0_episode_2_fail.pkl"] == "rewards has 2 entries; expected 3 (one per observation)"
    )
    assert reasons["episodes/notes.txt"] == "not an importable file"
    assert Episode.objects.count() == 1
