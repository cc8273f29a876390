"""The demo token gets least privilege: the scopes the demo's own commands use (ingest, teleop, rewards) on the
demo project only, also when an older demo agent had every scope on every project."""

from __future__ import annotations

import pytest

from projects.auth import agent_for_token
from projects.models import Agent, Project
from projects.services import agent_create
from webapp.demo.services import DEMO_AGENT_SCOPES, demo_agent_token

pytestmark = pytest.mark.django_db


def test_the_demo_token_reaches_only_the_demo_project_with_the_demos_scopes(tmp_path):
    demo = Project.objects.create(name="PickCube", task_description="x")
    Project.objects.create(name="Other", task_description="y")
    token_file = demo_agent_token(project=demo, token_file=tmp_path / "demo_agent_token.txt")
    agent = agent_for_token(token_file.read_text().strip())
    assert agent is not None and sorted(agent.scopes) == sorted(DEMO_AGENT_SCOPES) == ["ingest", "rewards", "teleop"]
    assert not agent.all_projects and list(agent.projects.all()) == [demo]
    assert (token_file.stat().st_mode & 0o777) == 0o600


def test_an_older_all_powerful_demo_agent_is_narrowed_and_its_token_kept(tmp_path):
    demo = Project.objects.create(name="PickCube", task_description="x")
    _, token = agent_create(name="demo-agent", scopes=["ingest", "labels", "training"], all_projects=True)
    token_file = tmp_path / "demo_agent_token.txt"
    token_file.write_text(token)
    demo_agent_token(project=demo, token_file=token_file)
    assert token_file.read_text() == token  # the printed command keeps working
    agent = Agent.objects.get(name="demo-agent")
    assert not agent.all_projects and sorted(agent.scopes) == ["ingest", "rewards", "teleop"]
    assert list(agent.projects.all()) == [demo]
