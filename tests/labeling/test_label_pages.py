"""Server-rendered labeling pages: the project page (progress, filters) and the episode page shell."""

from __future__ import annotations

import json

import pytest

from labeling.labels.selectors import episode_list
from labeling.proposals.services import proposals_generate
from projects.services import agent_create

from .factories import episode_with_frames

pytestmark = pytest.mark.django_db


def test_project_page_shows_progress_bars_and_links_to_import(user_client, project):
    episode = episode_with_frames(project=project, num_steps=6, size=16)
    user_client.put(
        f"/api/episodes/{episode.uuid}/frame-labels", {"start": 0, "end": 2, "value": "fail"}, "application/json"
    )
    html = user_client.get(f"/projects/{project.pk}/").content.decode()
    assert f'href="/projects/{project.pk}/import/"' in html
    assert "3/150" in html and "0/50" in html
    assert f"/episodes/{episode.uuid}/label/" in html
    assert "partly" in html


def test_episode_filters(project):
    robot = agent_create(name="robot-1", kind="robot")[0]
    labeled = episode_with_frames(project=project, num_steps=5, size=16, agent=robot, source="robot")
    partly = episode_with_frames(project=project, num_steps=5, size=16, success_from=99)
    untouched = episode_with_frames(project=project, num_steps=5, size=16)
    from labeling.labels.services import Actor, frame_labels_set

    frame_labels_set(episode=labeled, items=[(i, "fail") for i in range(5)], actor=Actor())
    frame_labels_set(episode=partly, items=[(0, "fail")], actor=Actor())
    proposals_generate(project=project, episodes=project.episodes.filter(pk=untouched.pk))

    def uuids(**filters):
        return {e.uuid for e in episode_list(project=project, **filters)}

    assert uuids(state="labeled") == {labeled.uuid}
    assert uuids(state="partly") == {partly.uuid}
    assert uuids(state="unlabeled") == {untouched.uuid}
    assert uuids(source="robot") == {labeled.uuid}
    assert uuids(agent="robot-1") == {labeled.uuid}
    assert uuids(proposals="yes") == {untouched.uuid}
    assert uuids(proposals="no") == {labeled.uuid, partly.uuid}
    assert uuids(success="no") == {partly.uuid}
    assert uuids(success="yes") == {labeled.uuid, untouched.uuid}
    counts = {
        e.uuid: (e.human_frames, e.open_frame_proposals, e.open_window_proposals) for e in episode_list(project=project)
    }
    assert counts[labeled.uuid] == (5, 0, 0) and counts[untouched.uuid] == (0, 5, 1)


def test_project_page_filter_form_narrows_the_table(user_client, project):
    episode_with_frames(project=project, num_steps=5, size=16, source="robot")
    episode_with_frames(project=project, num_steps=5, size=16, source="sim")
    html = user_client.get(f"/projects/{project.pk}/?source=robot").content.decode()
    assert "(1 of 2)" in html


def test_labeling_page_embeds_the_episode_data(user_client, project):
    episode = episode_with_frames(project=project, num_steps=7, size=16)
    response = user_client.get(f"/episodes/{episode.uuid}/label/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "pages/labeling.js" in html
    start = html.index('<script id="page-data" type="application/json">') + len(
        '<script id="page-data" type="application/json">'
    )
    data = json.loads(html[start : html.index("</script>", start)])
    assert data["episode"]["uuid"] == str(episode.uuid) and len(data["frames"]["main"]) == 7
    assert data["links"]["project"] == f"/projects/{project.pk}/"
    assert f'<link rel="preload" as="image" href="{data["frames"]["main"][0]}">' in html
    html = user_client.get(f"/episodes/{episode.uuid}/label/?step=3").content.decode()
    assert f'<link rel="preload" as="image" href="{data["frames"]["extra"][3]}">' in html


def test_pages_need_a_login(client, project):
    episode = episode_with_frames(project=project, num_steps=2, size=16)
    assert client.get(f"/projects/{project.pk}/").status_code == 302
    assert client.get(f"/episodes/{episode.uuid}/label/").status_code == 302


SETTINGS = {
    "target_success_frames": 20,
    "target_fail_frames": 60,
    "target_windows_per_class": 10,
    "window_size": 3,
    "trend_stride": 2,
    "trend_delta_threshold": 0.1,
    "trend_tail_unclear_ratio": 0.2,
}


def test_labeling_settings_are_saved_from_the_project_page(user_client, project):
    response = user_client.post(f"/projects/{project.pk}/labeling-settings/", SETTINGS)
    assert response.status_code == 302
    project.refresh_from_db()
    assert project.trend_params() == {"window_size": 3, "stride": 2, "delta_threshold": 0.1, "tail_unclear_ratio": 0.2}
    assert (project.target_success_frames, project.target_fail_frames) == (20, 60)
    assert "0/20" in user_client.get(f"/projects/{project.pk}/").content.decode()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("trend_tail_unclear_ratio", 1.5, "between 0 and 1"), ("window_size", 0, "at least one step")],
)
def test_bad_labeling_settings_are_refused_with_a_message(user_client, project, field, value, message):
    response = user_client.post(f"/projects/{project.pk}/labeling-settings/", {**SETTINGS, field: value})
    assert response.status_code == 400
    assert message in response.content.decode()
    project.refresh_from_db()
    assert project.window_size == 5 and project.trend_tail_unclear_ratio == 0.15


def test_deep_pages_show_the_oldest_episodes_with_their_counts(user_client, project):
    from labeling.labels.selectors import episode_list_ids, episodes_by_ids

    episodes = [episode_with_frames(project=project, num_steps=2, size=16) for _ in range(5)]
    from labeling.labels.services import Actor, frame_labels_set

    frame_labels_set(episode=episodes[0], items=[(0, "fail"), (1, "fail")], actor=Actor())
    frame_labels_set(episode=episodes[1], items=[(0, "fail")], actor=Actor())
    ids = episode_list_ids(project=project)
    assert ids == [e.pk for e in reversed(episodes)]
    rows = episodes_by_ids(project=project, ids=ids[3:])
    assert [(e.pk, e.human_frames, e.label_state) for e in rows] == [
        (episodes[1].pk, 1, "partly"),
        (episodes[0].pk, 2, "labeled"),
    ]
    body = user_client.get(f"/api/projects/{project.pk}/episodes?page_size=2&page=3").json()
    assert body["count"] == 5 and [r["uuid"] for r in body["results"]] == [str(episodes[0].uuid)]
    assert body["results"][0]["label_state"] == "labeled"
    html = user_client.get(f"/projects/{project.pk}/?state=unlabeled&page=999").content.decode()
    assert "(3 of 5)" in html and str(episodes[2].uuid)[:10] in html


@pytest.mark.django_db
def test_the_episode_list_shows_the_labels_verdict_beside_the_env_flag_named_apart(user_client, project):
    """An episode the env calls a success but whose every frame a person labeled fail says both, apart."""
    from labeling.labels.services import Actor, frame_labels_set

    episode = episode_with_frames(project=project, num_steps=4, size=16, success_from=2)  # env: success
    unlabeled = episode_with_frames(project=project, num_steps=4, size=16, success_from=99)  # env: fail
    frame_labels_set(episode=episode, items=[(i, "fail") for i in range(4)], actor=Actor())
    html = user_client.get(f"/projects/{project.pk}/").content.decode()
    assert "<th title=\"The env's own success flag" in html and ">Env success</th>" in html
    assert ">Labels' verdict</th>" in html and ">Episode success <select" not in html
    row = html[html.index(str(episode.uuid)[:10]) :]
    row = row[: row.index("</tr>")]
    assert "env success" in row and "labeled fail" in row
    other = html[html.index(str(unlabeled.uuid)[:10]) :]
    other = other[: other.index("</tr>")]
    assert "env fail" in other and "not labeled" in other


@pytest.mark.django_db
def test_open_proposal_counts_agree_between_the_episode_list_and_the_panel(user_client, project):
    """Proposals on steps a person labeled wait for no decision: the list's "Open proposals", its "has open"
    filter and the panel all leave them out (the tour saw 85 on a fully labeled episode, 62 in the panel)."""
    from labeling.labels.selectors import project_open_proposals
    from labeling.labels.services import Actor, frame_labels_set

    labeled = episode_with_frames(project=project, num_steps=5, size=16, success_from=2)
    waiting = episode_with_frames(project=project, num_steps=5, size=16, success_from=2)
    proposals_generate(project=project, episodes=project.episodes.all())
    frame_labels_set(episode=labeled, items=[(i, "fail") for i in range(5)], actor=Actor())
    rows = {e.uuid: e for e in episode_list(project=project)}
    panel = project_open_proposals(project=project)
    assert rows[labeled.uuid].open_frame_proposals == 0 and panel["settled_frames"] == 5
    assert rows[waiting.uuid].open_frame_proposals == panel["frames"] == 5
    listed = sum(e.open_frame_proposals for e in rows.values())
    assert listed == panel["frames"]
    assert sum(e.open_window_proposals for e in rows.values()) == panel["windows"]
    has_open = {e.uuid for e in episode_list(project=project, proposals="yes")}
    assert waiting.uuid in has_open  # the filter follows the same rule: only what still waits counts
    assert (labeled.uuid in has_open) == (rows[labeled.uuid].open_window_proposals > 0)


@pytest.mark.django_db
def test_a_target_the_data_cannot_meet_says_why_and_a_zero_target_is_hidden(user_client, project):
    """The demo's "Negative windows 0/50" could never fill: with no negative window labeled or proposed, the
    row says what would fill it; a target of 0 is not shown at all."""
    from labeling.labels.selectors import project_progress

    episode_with_frames(project=project, num_steps=6, size=16, success_from=3)  # success only rises
    proposals_generate(project=project, episodes=project.episodes.all())
    rows = {p.kind: p for p in project_progress(project=project)}
    assert rows["negative"].done == 0 and "only where success falls" in rows["negative"].note
    assert rows["success"].note == ""
    html = user_client.get(f"/projects/{project.pk}/").content.decode()
    assert "only where success falls within a window" in html
    api = user_client.get(f"/api/projects/{project.pk}/progress").json()
    assert any("only where success falls" in p["note"] for p in api["progress"])
    project.target_windows_per_class = 0
    project.save()
    assert {p.kind for p in project_progress(project=project)} == {"success", "fail"}
    assert "Negative windows" not in user_client.get(f"/projects/{project.pk}/").content.decode()
