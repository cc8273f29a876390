"""The agent CLI against the real server: a refused token, and a replayed episode recorded whole."""

from __future__ import annotations

import subprocess
import sys

import pytest

from labeling.models import Episode
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


def replay(url: str, token: str, *extra: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "robot_agent", "replay", "--server", url, "--token", token, "--project", "PickCube",
            "--hz", "50", "--quiet", *extra]  # fmt: skip
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_refused_token_is_reported_and_nothing_is_recorded(live_server_url, project):
    result = replay(live_server_url, "rs_not-a-token", "--synthetic-steps", "5")
    assert result.returncode == 1
    assert "refused the connection (HTTP 403): check --token" in result.stderr
    assert Episode.objects.count() == 0


def test_an_unknown_project_is_reported(live_server_url, project, agent_token):
    result = replay(live_server_url, agent_token[1], "--synthetic-steps", "5", "--project", "Nope")
    assert result.returncode == 1 and "no project named 'Nope'" in result.stderr


def test_a_replayed_episode_is_recorded_whole(live_server_url, project, agent_token):
    result = replay(live_server_url, agent_token[1], "--synthetic-steps", "25")
    assert result.returncode == 0, result.stderr
    episode = Episode.objects.get()
    assert episode.num_steps == 25 and episode.success is True and episode.status == Episode.Status.FINISHED
    assert episode.steps.filter(env_success=True).count() == 7  # the synthetic episode's last quarter
