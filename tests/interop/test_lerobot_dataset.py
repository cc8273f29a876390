"""LeRobot's own code on both ends: a dataset written by LeRobot 0.4.4 (`LeRobotDataset.create`, `add_frame`,
`save_episode`, `finalize`: the v3.0 layout, AV1 videos holding several episodes each) imports into a project,
and the project's export is read back by LeRobot's `LeRobotDataset` (tests/interop/lerobot_side.py, in the
side environment scripts/lib.sh `ensure_lerobot_env` builds). Frames are 64x64 solid colours, so the pixels
survive the lossy codecs within a few levels."""

from __future__ import annotations

import pytest

from labeling.imports.lerobot.export import lerobot_export
from labeling.imports.services import import_paths
from labeling.models import Episode, FrameLabel, Step
from tests.labeling.lerobot_builders import close, first_pixels, pixel

from .conftest import side_run

LENGTHS, SUCCESS = [3, 4], [True, False]


@pytest.mark.django_db
def test_a_dataset_lerobot_wrote_imports_and_lerobot_reads_the_export(project, user, tmp_path, settings):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    written = side_run(
        "write",
        side="lerobot",
        root=tmp_path / "lerobot_ds",
        cameras=["front", "wrist"],
        fps=10,
        lengths=LENGTHS,
        success=SUCCESS,
        task="pick the cube",
    )
    assert written == {"codebase_version": "v3.0", "total_frames": 7}

    summary = import_paths(project=project, paths=[tmp_path / "lerobot_ds"])

    assert (summary.episodes, summary.steps, summary.frames, summary.failed) == (2, 7, 14, [])
    episodes = list(Episode.objects.order_by("metadata__episode_index"))
    assert [e.success for e in episodes] == SUCCESS and [e.num_steps for e in episodes] == LENGTHS
    assert episodes[0].metadata["task_description"] == "pick the cube"
    assert episodes[0].metadata["cameras"] == {"observation.images.front": "main", "observation.images.wrist": "extra"}
    for e, episode in enumerate(episodes):  # episode 1 starts mid-file in LeRobot's shared video files
        assert close(first_pixels(episode, "main"), [pixel(e, i, 0) for i in range(LENGTHS[e])])
        assert close(first_pixels(episode, "extra"), [pixel(e, i, 1) for i in range(LENGTHS[e])])
    steps = list(Step.objects.filter(episode=episodes[0]).order_by("index"))
    assert [s.reward for s in steps] == [0.0, 0.0, 1.0] and [s.env_success for s in steps] == [False, False, True]
    assert steps[1].action == [0.5, -1.0] and steps[1].info["observation.state"] == [0.0, 1.0]

    second = list(Step.objects.filter(episode=episodes[1]).order_by("index"))
    for step, value in zip(second, ["fail", "fail", "success", "success"], strict=True):
        FrameLabel.objects.create(project=project, episode=episodes[1], step=step, value=value, author=user)
    lerobot_export(project=project, root=tmp_path / "export", max_frames=100, fps=10)

    read = side_run(
        "read",
        side="lerobot",
        root=tmp_path / "export",
        columns=["episode_index", "label", "next.success", "next.reward"],
    )

    assert (read["codebase_version"], read["fps"], read["num_episodes"], read["num_frames"]) == ("v3.0", 10, 2, 7)
    assert read["video_keys"] == ["observation.images.main", "observation.images.extra"]
    assert read["tasks"] == [project.task_description]
    columns = read["columns"]
    assert columns["episode_index"] == [0, 0, 0, 1, 1, 1, 1]
    assert columns["label"] == [-1, -1, -1, 0, 0, 1, 1]
    assert columns["next.success"] == [False] * 5 + [True, True]
    assert columns["next.reward"] == [0.0] * 5 + [1.0, 1.0]
    want = {c: [pixel(e, i, k) for e in range(2) for i in range(LENGTHS[e])] for k, c in enumerate(["main", "extra"])}
    assert close(read["first_pixels"]["observation.images.main"], want["main"])
    assert close(read["first_pixels"]["observation.images.extra"], want["extra"])
