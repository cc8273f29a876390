"""Proposals: generated from env success and the trend rule, accepted or rejected one, a range, an
episode or a whole project at a time, always kept apart from human labels."""

from __future__ import annotations

import pytest

from labeling.models import FrameLabel, LabelChange, WindowLabel
from labeling.proposals.trend import TrendParams, trend_windows

from .factories import episode_with_frames

pytestmark = pytest.mark.django_db


def post(client, url, body=None):
    return client.post(url, body or {}, "application/json")


def generate_all(client, project) -> dict:
    """Ask for the whole project's proposals (a background job), run the job's task body here, and return
    its counts."""
    from labeling.proposals.jobs import proposal_job_run

    response = post(client, f"/api/projects/{project.pk}/proposals/generate")
    assert response.status_code == 202, response.content
    assert proposal_job_run(response.json()["id"]) == "succeeded"
    return client.get(response.json()["url"]).json()["summary"]


def labels(episode, source):
    return dict(FrameLabel.objects.filter(episode=episode, source=source).values_list("step__index", "value"))


def test_generate_proposes_frames_from_env_success_and_windows_from_the_trend_rule(user_client, project):
    episode = episode_with_frames(project=project, num_steps=20, size=16, success_from=15)
    summary = generate_all(user_client, project)
    assert summary["frames_created"] == 20 and summary["windows_created"] == 16
    assert labels(episode, "proposal") == {i: "success" if i >= 15 else "fail" for i in range(20)}
    assert labels(episode, "human") == {}
    rewards = list(episode.steps.order_by("index").values_list("reward", flat=True))
    expected = trend_windows(rewards, TrendParams(**project.trend_params()))
    rows = list(WindowLabel.objects.filter(episode=episode, source="proposal").order_by("start"))
    assert [(w.start, w.end, w.value) for w in rows] == [(w.start, w.end, w.label) for w in expected]
    assert rows[0].score == pytest.approx(expected[0].delta)
    assert rows[0].params["delta_threshold"] == 0.05 and rows[0].params["score_source"] == "reward"
    assert rows[-1].value == "unclear" and rows[-1].params["tail"] is True  # tail forced
    assert {w.value for w in rows} >= {"positive", "unclear"}


def test_window_proposals_use_the_step_score_when_present(project):
    from labeling.proposals.services import proposals_generate

    project.trend_tail_unclear_ratio = 0.0
    project.save()
    scores = [0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -1.0]  # gae falls while rewards rise
    episode = episode_with_frames(project=project, num_steps=7, size=16, scores=scores)
    proposals_generate(project=project)
    rows = WindowLabel.objects.filter(episode=episode, source="proposal").order_by("start")
    assert [(w.start, w.value, w.score) for w in rows] == [
        (0, "unclear", 0.0),
        (1, "negative", -1.0),
        (2, "negative", -1.0),
    ]
    assert rows[0].params["score_source"] == "score"


def test_a_step_without_a_score_falls_back_to_its_reward(project):
    from labeling.models import Step
    from labeling.proposals.services import proposals_generate

    project.trend_tail_unclear_ratio = 0.0
    project.window_size = 2
    project.save()
    episode = episode_with_frames(
        project=project, num_steps=3, size=16, rewards=[0.0, 0.5, 0.0], scores=[0.0, 1.0, 1.0]
    )
    Step.objects.filter(episode=episode, index=2).update(score=None)  # reward 0.0 is used for step 2
    proposals_generate(project=project)
    rows = WindowLabel.objects.filter(episode=episode, source="proposal").order_by("start")
    assert [(w.value, w.score) for w in rows] == [("positive", 1.0), ("negative", -1.0)]
    assert rows[0].params["score_source"] == "score+reward"


def test_regenerating_keeps_decisions_and_follows_new_parameters(user_client, project):
    episode = episode_with_frames(project=project, num_steps=12, size=16)
    generate_all(user_client, project)
    post(
        user_client,
        f"/api/projects/{project.pk}/proposals/reject",
        {"kind": "frame", "episode": str(episode.uuid), "start": 0, "end": 0},
    )
    again = generate_all(user_client, project)
    assert again["frames_created"] == 0 and again["windows_created"] == 0
    assert FrameLabel.objects.get(episode=episode, source="proposal", step__index=0).status == "rejected"
    project.window_size = 3
    project.save()
    changed = generate_all(user_client, project)
    assert changed["windows_removed"] == 8 and changed["windows_created"] == 10
    assert set(WindowLabel.objects.filter(episode=episode).values_list("end", "start").distinct()) == {
        (s + 2, s) for s in range(10)
    }


def test_accepting_a_range_writes_human_labels_and_marks_proposals_accepted(user_client, user, project):
    episode = episode_with_frames(project=project, num_steps=10, size=16, success_from=8)
    generate_all(user_client, project)
    user_client.put(f"/api/episodes/{episode.uuid}/frame-labels", {"start": 7, "value": "success"}, "application/json")
    response = post(
        user_client,
        f"/api/projects/{project.pk}/proposals/accept",
        {"kind": "frame", "episode": str(episode.uuid), "start": 6, "end": 9},
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["frames"] == 4 and body["windows"] == 0
    # 7 was success (human) and becomes fail; the others were empty
    assert body["previous_frames"][str(episode.uuid)] == [
        {"index": 6, "value": None},
        {"index": 7, "value": "success"},
        {"index": 8, "value": None},
        {"index": 9, "value": None},
    ]
    assert labels(episode, "human") == {6: "fail", 7: "fail", 8: "success", 9: "success"}
    statuses = dict(FrameLabel.objects.filter(episode=episode, source="proposal").values_list("step__index", "status"))
    assert [statuses[i] for i in range(10)] == ["open"] * 6 + ["accepted"] * 4
    assert LabelChange.objects.filter(episode=episode, action="accept", author=user).exists()


def test_accepting_windows_in_a_range_takes_only_windows_inside_it(user_client, project):
    episode = episode_with_frames(project=project, num_steps=12, size=16)
    generate_all(user_client, project)
    post(
        user_client,
        f"/api/projects/{project.pk}/proposals/accept",
        {"kind": "window", "episode": str(episode.uuid), "start": 2, "end": 7},
    )
    human = list(
        WindowLabel.objects.filter(episode=episode, source="human").order_by("start").values_list("start", "end")
    )
    assert human == [(2, 6), (3, 7)]


def test_accepting_all_proposals_of_a_project_in_bulk(user_client, project):
    first = episode_with_frames(project=project, num_steps=10, size=16)
    second = episode_with_frames(project=project, num_steps=8, size=16)
    generate_all(user_client, project)
    body = post(user_client, f"/api/projects/{project.pk}/proposals/accept", {"kind": "all"}).json()
    assert body["frames"] == 18 and body["windows"] == 6 + 4
    assert labels(first, "human") == labels(first, "proposal")
    assert labels(second, "human") == labels(second, "proposal")
    assert WindowLabel.objects.filter(source="human").count() == 10
    assert not FrameLabel.objects.filter(source="proposal", status="open").exists()
    again = post(user_client, f"/api/projects/{project.pk}/proposals/accept", {"kind": "all"}).json()
    assert again["frames"] == 0 and again["windows"] == 0


def test_rejecting_leaves_human_labels_alone_and_reopen_undoes_it(user_client, project):
    episode = episode_with_frames(project=project, num_steps=10, size=16)
    generate_all(user_client, project)
    user_client.put(f"/api/episodes/{episode.uuid}/frame-labels", {"start": 0, "value": "success"}, "application/json")
    scope = {"kind": "all", "episode": str(episode.uuid)}
    body = post(user_client, f"/api/projects/{project.pk}/proposals/reject", scope).json()
    assert body["frames"] == 10 and body["windows"] == 6
    assert labels(episode, "human") == {0: "success"}
    assert not FrameLabel.objects.filter(source="proposal").exclude(status="rejected").exists()
    # one history row per run of equal values: fail 0..7, success 8..9
    assert LabelChange.objects.filter(action="reject", kind="frame").count() == 2
    body = post(user_client, f"/api/projects/{project.pk}/proposals/reopen", scope).json()
    assert body["frames"] == 10
    assert not FrameLabel.objects.filter(source="proposal").exclude(status="open").exists()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": "frames"}, "kind"),
        ({"kind": "frame", "start": 1}, "needs an episode"),
        ({"kind": "frame", "episode": "00000000-0000-0000-0000-000000000000"}, "no such episode"),
    ],
)
def test_bad_proposal_requests_get_a_400(user_client, project, body, message):
    response = post(user_client, f"/api/projects/{project.pk}/proposals/accept", body)
    assert response.status_code == 400
    assert message in response.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_generation_of_one_episode_neither_fails_nor_duplicates(project):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from labeling.proposals.services import proposals_generate

    episode = episode_with_frames(project=project, num_steps=30, size=16)

    def generate(_):
        try:
            return proposals_generate(project=project, episodes=project.episodes.filter(pk=episode.pk))
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(generate, range(4)))
    # exactly one generation creates them; none here when the background worker (proposals for finished
    # episodes) got there first
    assert sum(r.frames_created for r in results) in (0, 30)
    assert FrameLabel.objects.filter(episode=episode, source="proposal").count() == 30
    assert WindowLabel.objects.filter(episode=episode, source="proposal").count() == 26


def test_the_open_count_leaves_out_proposals_a_human_label_already_settles(user_client, project):
    from labeling.labels.selectors import project_open_proposals

    episode = episode_with_frames(project=project, num_steps=10, size=16, success_from=8)
    generate_all(user_client, project)
    before = project_open_proposals(project=project)
    assert before["frames"] == 10 and before["settled_frames"] == 0
    user_client.put(
        f"/api/episodes/{episode.uuid}/frame-labels", {"start": 6, "end": 9, "value": "success"}, "application/json"
    )
    after = project_open_proposals(project=project)
    assert after["frames"] == 6 and after["settled_frames"] == 4  # steps 6-9 carry a human label now
    window = WindowLabel.objects.filter(episode=episode, source="proposal").first()
    WindowLabel.objects.create(
        project=project, episode=episode, start=window.start, end=window.end, value=window.value, source="human"
    )
    assert project_open_proposals(project=project)["settled_windows"] == 1
    page = user_client.get(f"/projects/{project.pk}/").content.decode()
    assert '<b id="open-frames">6</b>' in page and "4 frame and 1 window proposals more" in page
    progress = user_client.get(f"/api/projects/{project.pk}/progress").json()
    assert progress["open_proposals"]["frames"] == 6 and progress["open_proposals"]["settled_frames"] == 4
