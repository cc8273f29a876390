"""The main pages and API reads ask the database a fixed number of queries, whatever the project's size:
two episodes or thirty, two steps or sixty (no query per row). Counts, not times: never a timed test."""

from __future__ import annotations

import uuid as uuid_lib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labeling.models import Episode, Frame, FrameLabel, Step, WindowLabel
from labeling.proposals.services import proposals_generate
from projects.models import Agent

pytestmark = pytest.mark.django_db


def add_episodes(project, user, count: int, steps: int = 4) -> list[Episode]:
    """`count` episodes of `steps` steps, one frame per camera, a human label on the first step, a human
    window, each from one of two agents (the frames name files that need not exist: nothing reads them)."""
    agents = [
        Agent.objects.get_or_create(name=f"counter-{i}", defaults={"token_hash": f"counter-{i}"})[0] for i in range(2)
    ]
    created = []
    for n in range(count):
        episode = Episode.objects.create(
            project=project,
            uuid=uuid_lib.uuid4(),
            source=Episode.Source.ROBOT if n % 2 else Episode.Source.SIM,
            agent=agents[n % 2],
            success=bool(n % 2),
            num_steps=steps,
        )
        rows = Step.objects.bulk_create(
            Step(episode=episode, index=i, reward=i / steps, env_success=i == steps - 1) for i in range(steps)
        )
        Frame.objects.bulk_create(
            [
                Frame(
                    step=step,
                    camera=camera,
                    image=f"frames/{project.pk}/{episode.uuid}/{step.index}_{camera}.png",
                    width=8,
                    height=8,
                )
                for step in rows
                for camera in project.camera_views
            ]
        )
        FrameLabel.objects.create(project=project, episode=episode, step=rows[0], value="fail", author=user)
        WindowLabel.objects.create(project=project, episode=episode, start=0, end=1, value="positive", author=user)
        created.append(episode)
    return created


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return len(captured.captured_queries)


PROJECT_URLS = [
    "/projects/{pk}/",
    "/projects/{pk}/?source=robot&state=partly&proposals=yes&success=yes",
    "/projects/{pk}/?agent=counter-1&page=2",
    "/api/projects/{pk}/episodes",
    "/api/projects/{pk}/episodes?source=robot&state=partly&proposals=yes",
    "/api/projects/{pk}/progress",
    "/projects/{pk}/training/",
    "/",
]


@pytest.mark.parametrize("template", PROJECT_URLS)
def test_project_reads_ask_as_many_queries_for_two_episodes_as_for_thirty(user_client, user, project, template):
    url = template.format(pk=project.pk)
    add_episodes(project, user, 2)  # one of each source and agent, so every filter finds a row
    proposals_generate(project=project)
    small = queries(user_client, url)
    add_episodes(project, user, 28)
    proposals_generate(project=project)
    large = queries(user_client, url)
    assert large == small, f"{url}: {small} queries with 2 episodes, {large} with 30"
    assert large <= 20


@pytest.mark.parametrize("template", ["/api/episodes/{uuid}/labeling", "/episodes/{uuid}/label/"])
def test_one_episode_reads_ask_as_many_queries_for_two_steps_as_for_sixty(user_client, user, project, template):
    short, long = add_episodes(project, user, 1, steps=2)[0], add_episodes(project, user, 1, steps=60)[0]
    proposals_generate(project=project)
    small = queries(user_client, template.format(uuid=short.uuid))
    large = queries(user_client, template.format(uuid=long.uuid))
    assert large == small
    assert large <= 15


def test_episode_list_api_pages_and_filters(user_client, user, project):
    episodes = add_episodes(project, user, 7)
    proposals_generate(project=project)
    body = user_client.get(f"/api/projects/{project.pk}/episodes?page_size=3").json()
    assert body["count"] == 7
    assert [row["uuid"] for row in body["results"]] == [str(e.uuid) for e in reversed(episodes)][:3]
    assert body["next"] and body["results"][0]["label_url"] == f"/episodes/{episodes[-1].uuid}/label/"
    robot = user_client.get(f"/api/projects/{project.pk}/episodes?source=robot&state=partly").json()
    assert {row["uuid"] for row in robot["results"]} == {str(e.uuid) for e in episodes[1::2]}
    # 4 steps proposed, the first one labeled by a person: 3 still wait for a decision (the panel's count)
    assert all(row["agent"] == "counter-1" and row["open_frame_proposals"] == 3 for row in robot["results"])
    bad = user_client.get(f"/api/projects/{project.pk}/episodes?state=finished&source=moon")
    assert bad.status_code == 400
    assert set(bad.json()["errors"]) == {"state", "source"}


def test_postgresql_does_not_jit_compile_page_queries():
    """JIT compiling costs 300+ ms on the counts of a million-frame project (bench/scale.py), far more than the
    queries themselves; settings turn it off unless POSTGRES_JIT=1."""
    assert connection.vendor == "postgresql", "the test suite runs on PostgreSQL (scripts/test.sh)"
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
