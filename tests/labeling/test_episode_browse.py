"""The episode list searches, sorts and shows thumbnails, on the project page and in the API, and refuses a
sort or a search it cannot do with the reason."""

from __future__ import annotations

import pytest

from labeling.models import Episode

from .test_query_counts import add_episodes

pytestmark = pytest.mark.django_db


def uuids(user_client, project, query: str) -> list[str]:
    response = user_client.get(f"/api/projects/{project.pk}/episodes?{query}")
    assert response.status_code == 200, response.content
    return [row["uuid"] for row in response.json()["results"]]


@pytest.fixture
def episodes(project, user):
    made = add_episodes(project, user, 4)  # agents counter-0 / counter-1 alternate; success False / True
    for n, (episode, env, steps) in enumerate(
        zip(made, ["PickCube-v1", "StackCube-v1", "PickCube-v1", "PegInsertion-v1"], [4, 9, 2, 6], strict=True)
    ):
        Episode.objects.filter(pk=episode.pk).update(env_id=env, num_steps=steps, success=[False, True, None, True][n])
    return [Episode.objects.get(pk=e.pk) for e in made]


def test_search_matches_env_agent_and_the_start_of_the_id(user_client, project, episodes):
    assert uuids(user_client, project, "q=pickcube") == [str(episodes[2].uuid), str(episodes[0].uuid)]
    assert uuids(user_client, project, "q=COUNTER-1") == [str(episodes[3].uuid), str(episodes[1].uuid)]
    prefix = str(episodes[1].uuid)[:10]  # dashes as the page shows them
    assert str(episodes[1].uuid) in uuids(user_client, project, f"q={prefix}")
    assert all(u.startswith(prefix) or u == str(episodes[1].uuid) for u in uuids(user_client, project, f"q={prefix}"))
    assert uuids(user_client, project, "q=no-such-episode") == []
    too_long = user_client.get(f"/api/projects/{project.pk}/episodes?q={'x' * 101}")
    assert too_long.status_code == 400 and "q" in too_long.json()["errors"]


def test_sorts_order_by_steps_success_and_age(user_client, project, episodes):
    ids = [str(e.uuid) for e in episodes]
    assert uuids(user_client, project, "") == ids[::-1]  # newest first by default
    assert uuids(user_client, project, "sort=oldest") == ids
    assert uuids(user_client, project, "sort=longest") == [ids[1], ids[3], ids[0], ids[2]]
    assert uuids(user_client, project, "sort=shortest") == [ids[2], ids[0], ids[3], ids[1]]
    assert uuids(user_client, project, "sort=success") == [ids[3], ids[1], ids[0], ids[2]]  # unknown last
    assert uuids(user_client, project, "sort=fail") == [ids[0], ids[3], ids[1], ids[2]]
    assert uuids(user_client, project, "sort=longest&q=pickcube") == [ids[0], ids[2]]
    bad = user_client.get(f"/api/projects/{project.pk}/episodes?sort=random")
    assert bad.status_code == 400 and "sort" in bad.json()["errors"]


def test_each_row_has_its_last_frame_from_the_first_camera_as_thumbnail(user_client, user, project):
    (episode,) = add_episodes(project, user, 1, steps=5)
    (row,) = user_client.get(f"/api/projects/{project.pk}/episodes").json()["results"]
    camera = project.camera_views[0]
    assert row["thumbnail"].endswith(f"/frames/{project.pk}/{episode.uuid}/4_{camera}.png")
    Episode.objects.filter(pk=episode.pk).update(num_steps=9)  # still receiving: its last step has no frame yet
    (row,) = user_client.get(f"/api/projects/{project.pk}/episodes").json()["results"]
    assert row["thumbnail"] is None


def test_the_project_page_searches_sorts_and_shows_thumbnails(user_client, project, episodes):
    page = user_client.get(f"/projects/{project.pk}/?q=pickcube&sort=shortest")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'name="q" value="pickcube"' in html and '<option value="shortest" selected>' in html
    rows = [str(e.uuid)[:12] for e in page.context["episodes"]]
    assert rows == [str(episodes[2].uuid)[:12], str(episodes[0].uuid)[:12]]
    assert html.count('<td class="thumb"><a') == 2 and 'alt="last frame of episode' in html
