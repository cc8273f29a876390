"""A real PickCube-v1 episode on the CPU, driven by the agent's CLI and recorded by the real server."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from django.core.files.storage import default_storage

from common.images.checks import decode_rgb
from inference.teleop.models import TeleopSession
from labeling.models import Episode, Frame
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_pickcube_episode_streams_through_the_agent_and_is_recorded(
    live_server_url, process_env, project, agent_token
):
    args = [
        sys.executable, "-m", "robot_agent", "run", "--server", live_server_url, "--token", agent_token[1],
        "--project", "PickCube", "--robot", "maniskill", "--policy", "random", "--hz", "20", "--episodes", "1",
        "--max-steps", "12", "--width", "64", "--height", "64", "--format", "png",
    ]  # fmt: skip
    result = subprocess.run(args, cwd=ROOT, env=process_env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "done: 1 episodes, 13 steps" in result.stderr

    episode = Episode.objects.get()
    assert episode.env_id == "PickCube-v1" and episode.agent == agent_token[0]
    assert episode.status == Episode.Status.FINISHED and episode.num_steps == 13
    steps = list(episode.steps.order_by("index"))
    assert steps[0].action == [] and len(steps[1].action) == 7  # reset observation, then pd_ee_delta_pose actions
    assert steps[-1].truncated
    frames = Frame.objects.filter(step__episode=episode)
    assert frames.count() == 26 and set(frames.values_list("camera", flat=True)) == {"main", "extra"}
    main = frames.get(step__index=5, camera="main")
    with default_storage.open(main.image.name) as stored:
        pixels = decode_rgb(stored.read())
    assert pixels.shape == (64, 64, 3) and pixels.std() > 5  # a rendered scene, not a blank image
    assert np.asarray(pixels).dtype == np.uint8
    session = TeleopSession.objects.get()
    assert session.env_id == "PickCube-v1" and list(session.episodes.all()) == [episode]
