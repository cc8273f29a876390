"""Projects, memberships and agents moved from the labeling app to projects in Django's state only: a database
with rows in every moved table (and in the tables that point at them) migrates back to before the move, forward
again and back and forward once more with every row, grant and foreign key kept, and the content types follow."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from inference.models import Deployment
from labeling.ingest.services import episode_create
from labeling.models import Episode
from projects.models import Agent, Membership, Project
from projects.services import agent_create
from training.models import TrainedModel

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_THE_MOVE = [("projects", None)]  # unapplies projects 0001 and every migration of the step that needs it
MOVED = ("project", "membership", "agent")


def migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


def rows() -> dict:
    """Every moved row and its relations, read through the current models."""
    return {
        "projects": sorted(Project.objects.values_list("pk", "name", "camera_views")),
        "members": sorted(Membership.objects.values_list("project_id", "user_id", "role")),
        "agents": sorted(Agent.objects.values_list("pk", "name", "scopes", "token_hash")),
        "agent projects": sorted(Agent.projects.through.objects.values_list("agent_id", "project_id")),
        "agent deployments": sorted(Deployment.agents.through.objects.values_list("agent_id", "deployment_id")),
        "episodes": sorted(Episode.objects.values_list("pk", "project_id", "agent_id")),
    }


def test_the_move_goes_back_and_forward_with_every_row(project, user):
    agent, _ = agent_create(name="rl-1", kind="rl_worker", projects=[project])
    model = TrainedModel.objects.create(project=project, kind="resnet", name="m", checkpoint_path="x", config={})
    deployment = Deployment.objects.create(name="moved", trained_model=model, project=project)
    deployment.agents.add(agent)
    episode_create(project=project, uuid=uuid.uuid4(), agent=agent)
    before = rows()
    assert before["agent deployments"] == [(agent.pk, deployment.pk)] and before["members"]

    for _ in range(2):
        executor = migrate(BEFORE_THE_MOVE)
        assert ("projects", "0001_initial") not in executor.loader.applied_migrations
        old = executor.loader.project_state([("labeling", "0011_job_kit_data")]).apps
        assert old.get_model("labeling", "Agent").objects.get(pk=agent.pk).deployments.get().pk == deployment.pk
        assert old.get_model("labeling", "Project").objects.count() == len(before["projects"])
        assert all(ContentType.objects.filter(app_label="labeling", model=m).exists() for m in MOVED)

        migrate(executor.loader.graph.leaf_nodes())
        assert rows() == before
        assert all(ContentType.objects.filter(app_label="projects", model=m).exists() for m in MOVED)
        assert not ContentType.objects.filter(app_label="labeling", model__in=MOVED).exists()

    assert list(agent.deployments.all()) == [deployment]  # the reverse name code reads
    assert Project._meta.db_table == "labeling_project" and Agent._meta.db_table == "labeling_agent"
