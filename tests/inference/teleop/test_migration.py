"""Moving TeleopSession from the inference app to teleop changes Django's state only: a database migrated
before the move (sessions in it, with their episodes) keeps its rows, now read through teleop's model."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from inference.teleop.models import TeleopSession
from labeling.ingest.services import episode_create

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_THE_MOVE = [("teleop", None)]  # unapplies teleop 0001 and inference 0007, which depends on it


def migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


def test_sessions_made_before_the_move_keep_their_rows_and_episodes(project, agent_token):
    agent = agent_token[0]
    episode, _ = episode_create(project=project, uuid=uuid.uuid4(), agent=agent)
    executor = migrate(BEFORE_THE_MOVE)
    old_apps = executor.loader.project_state([("inference", "0006_merge_rlinf_semantics_and_monitor")]).apps
    OldSession = old_apps.get_model("inference", "TeleopSession")
    assert ("teleop", "0001_initial") not in executor.loader.applied_migrations
    assert ContentType.objects.filter(app_label="inference", model="teleopsession").exists()
    old = OldSession.objects.create(agent_id=agent.pk, project_id=project.pk, robot="panda", step_count=7)
    old.episodes.add(episode.pk)

    migrate(executor.loader.graph.leaf_nodes())

    moved = TeleopSession.objects.get(pk=old.pk)
    assert (moved.robot, moved.step_count, moved.agent_id) == ("panda", 7, agent.pk)
    assert list(moved.episodes.values_list("pk", flat=True)) == [episode.pk]
    assert TeleopSession._meta.db_table == "inference_teleopsession"
    assert ContentType.objects.filter(app_label="teleop", model="teleopsession").exists()
    assert not ContentType.objects.filter(app_label="inference", model="teleopsession").exists()


def test_the_models_match_the_migrations():
    from django.core.management import call_command

    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
