"""The label API behind the labeling pages: frame and window labels, history, episode data."""

from __future__ import annotations

import pytest
from django.test import Client

from labeling.models import FrameLabel, LabelChange, WindowLabel
from projects.models import Membership

from .factories import episode_with_frames

pytestmark = pytest.mark.django_db


@pytest.fixture
def episode(project):
    return episode_with_frames(project=project, num_steps=12, size=16)


def frame_labels(episode, source="human"):
    return dict(FrameLabel.objects.filter(episode=episode, source=source).values_list("step__index", "value"))


def test_a_range_of_frames_is_labeled_in_one_request_and_history_keeps_one_row(user_client, user, episode):
    response = user_client.put(
        f"/api/episodes/{episode.uuid}/frame-labels", {"start": 2, "end": 5, "value": "fail"}, "application/json"
    )
    assert response.status_code == 200, response.content
    assert [c["index"] for c in response.json()["changed"]] == [2, 3, 4, 5]
    assert response.json()["changed"][0] == {"index": 2, "old": None, "new": "fail"}
    assert frame_labels(episode) == {2: "fail", 3: "fail", 4: "fail", 5: "fail"}
    change = LabelChange.objects.get(episode=episode)
    assert (change.kind, change.action, change.start, change.end, change.new_value, change.author) == (
        "frame",
        "set",
        2,
        5,
        "fail",
        user,
    )


def test_relabeling_overwrites_and_reports_old_values_for_undo(user_client, episode):
    url = f"/api/episodes/{episode.uuid}/frame-labels"
    user_client.put(url, {"start": 0, "end": 3, "value": "fail"}, "application/json")
    response = user_client.put(url, {"start": 2, "end": 4, "value": "success"}, "application/json")
    assert response.json()["changed"] == [
        {"index": 2, "old": "fail", "new": "success"},
        {"index": 3, "old": "fail", "new": "success"},
        {"index": 4, "old": None, "new": "success"},
    ]
    # undo: send the old values back as items
    undo = [{"index": c["index"], "value": c["old"]} for c in response.json()["changed"]]
    assert user_client.put(url, {"items": undo}, "application/json").status_code == 200
    assert frame_labels(episode) == {0: "fail", 1: "fail", 2: "fail", 3: "fail"}


def test_clearing_deletes_the_human_label_but_keeps_the_proposal(user_client, project, episode):
    from labeling.proposals.services import proposals_generate

    proposals_generate(project=project)
    url = f"/api/episodes/{episode.uuid}/frame-labels"
    user_client.put(url, {"start": 1, "value": "success"}, "application/json")
    response = user_client.put(url, {"start": 1, "value": None}, "application/json")
    assert response.json()["changed"] == [{"index": 1, "old": "success", "new": None}]
    assert frame_labels(episode) == {}
    assert frame_labels(episode, "proposal")[1] == "fail"
    assert LabelChange.objects.filter(episode=episode, action="clear").count() == 1


def test_last_write_wins_and_both_writes_stay_in_history(client, django_user_model, episode):
    bob = django_user_model.objects.create_user("bob", password="pw-bob-123")
    carol = django_user_model.objects.create_user("carol", password="pw-carol-123")
    for person in (bob, carol):  # reviewers may change each other's labels
        Membership.objects.create(project=episode.project, user=person, role="reviewer")
    url = f"/api/episodes/{episode.uuid}/frame-labels"
    for person, value in ((bob, "success"), (carol, "fail")):
        client.force_login(person)
        assert client.put(url, {"start": 7, "value": value}, "application/json").status_code == 200
    label = FrameLabel.objects.get(episode=episode, source="human")
    assert (label.value, label.author) == ("fail", carol)
    history = list(
        LabelChange.objects.filter(episode=episode).order_by("at").values_list("author__username", "new_value")
    )
    assert history == [("bob", "success"), ("carol", "fail")]


def test_agents_label_with_their_token(agent_client, agent_token, episode):
    response = agent_client.put(
        f"/api/episodes/{episode.uuid}/frame-labels", {"start": 0, "value": "success"}, format="json"
    )
    assert response.status_code == 200
    assert LabelChange.objects.get(episode=episode).agent == agent_token[0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"start": 3, "end": 2, "value": "fail"}, "end must not be before start"),
        ({"start": 0, "value": "maybe"}, "value"),
        ({"start": 11, "end": 12, "value": "fail"}, "no step 12"),
        ({"value": "fail"}, "send start"),
        ({"start": 0, "value": "fail", "items": []}, "either items"),
    ],
)
def test_bad_frame_requests_get_a_400_with_a_message(user_client, episode, body, message):
    response = user_client.put(f"/api/episodes/{episode.uuid}/frame-labels", body, "application/json")
    assert response.status_code == 400
    assert message in response.json()["detail"]
    assert not FrameLabel.objects.filter(episode=episode).exists()


def test_unknown_episode_is_a_404_and_anonymous_is_refused(user_client, episode):
    missing = "00000000-0000-0000-0000-000000000000"
    assert user_client.get(f"/api/episodes/{missing}/labeling").status_code == 404
    anonymous = Client()
    body = {"start": 0, "value": "fail"}
    assert anonymous.put(f"/api/episodes/{episode.uuid}/frame-labels", body, "application/json").status_code in (
        401,
        403,
    )
    assert anonymous.get(f"/api/episodes/{episode.uuid}/labeling").status_code in (401, 403)
    assert not FrameLabel.objects.exists()


def test_window_labels_overlap_update_and_delete(user_client, user, episode):
    url = f"/api/episodes/{episode.uuid}/window-labels"
    assert user_client.post(url, {"start": 0, "end": 4, "value": "positive"}, "application/json").status_code == 200
    assert user_client.post(url, {"start": 1, "end": 5, "value": "unclear"}, "application/json").status_code == 200
    response = user_client.post(url, {"start": 0, "end": 4, "value": "negative"}, "application/json")
    assert response.json()["changed"] == [{"start": 0, "end": 4, "old": "positive", "new": "negative"}]
    spans = set(WindowLabel.objects.filter(episode=episode).values_list("start", "end", "value"))
    assert spans == {(0, 4, "negative"), (1, 5, "unclear")}
    response = user_client.delete(f"{url}?start=1&end=5")
    assert response.json()["changed"] == [{"start": 1, "end": 5, "old": "unclear", "new": None}]
    assert WindowLabel.objects.filter(episode=episode).count() == 1
    actions = list(LabelChange.objects.filter(kind="window").order_by("at").values_list("action", flat=True))
    assert actions == ["set", "set", "set", "clear"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"start": 9, "end": 13, "value": "positive"}, 400, "outside the episode"),
        ({"start": 4, "end": 2, "value": "positive"}, 400, "end must not be before start"),
        ({"start": 0, "end": 4, "value": "good"}, 400, "value"),
    ],
)
def test_bad_window_requests_get_a_400(user_client, episode, body, status, message):
    response = user_client.post(f"/api/episodes/{episode.uuid}/window-labels", body, "application/json")
    assert response.status_code == status
    assert message in response.json()["detail"]


def test_episode_data_has_steps_frames_labels_and_windows_in_one_payload(user_client, project, episode):
    user_client.put(f"/api/episodes/{episode.uuid}/frame-labels", {"start": 3, "value": "fail"}, "application/json")
    user_client.post(
        f"/api/episodes/{episode.uuid}/window-labels", {"start": 2, "end": 6, "value": "positive"}, "application/json"
    )
    data = user_client.get(f"/api/episodes/{episode.uuid}/labeling").json()
    assert data["episode"]["num_steps"] == 12
    assert data["project"]["cameras"] == ["main", "extra"] and data["project"]["window_size"] == 5
    assert data["steps"]["index"] == list(range(12))
    assert data["steps"]["success"][-1] is True and data["steps"]["success"][0] is False
    assert len(data["frames"]["main"]) == 12 and all(
        url.startswith("/media/frames/") for url in data["frames"]["extra"]
    )
    assert data["frame_labels"]["human"][3] == "fail" and data["frame_labels"]["human"][4] is None
    assert data["windows"] == [
        {"start": 2, "end": 6, "value": "positive", "source": "human", "status": "open", "score": None}
    ]
    # frames are served to the logged-in user
    assert user_client.get(data["frames"]["main"][0]).status_code == 200


def test_history_lists_changes_newest_first(user_client, episode):
    url = f"/api/episodes/{episode.uuid}/frame-labels"
    user_client.put(url, {"start": 0, "value": "fail"}, "application/json")
    user_client.put(url, {"start": 0, "value": "success"}, "application/json")
    history = user_client.get(f"/api/episodes/{episode.uuid}/history").json()
    assert [(h["old_value"], h["new_value"], h["who"]) for h in history] == [
        ("fail", "success", "alice"),
        ("", "fail", "alice"),
    ]


def test_progress_counts_human_labels_against_targets(user_client, project, episode):
    user_client.put(
        f"/api/episodes/{episode.uuid}/frame-labels", {"start": 0, "end": 2, "value": "fail"}, "application/json"
    )
    user_client.put(f"/api/episodes/{episode.uuid}/frame-labels", {"start": 10, "value": "success"}, "application/json")
    data = user_client.get(f"/api/projects/{project.pk}/progress").json()
    by_kind = {p["kind"]: (p["done"], p["target"]) for p in data["progress"]}
    assert by_kind["success"] == (1, 50) and by_kind["fail"] == (3, 150) and by_kind["positive"] == (0, 50)


def test_frame_bundle_returns_the_stored_bytes_of_a_step_range(user_client, episode):
    from django.core.files.storage import default_storage

    response = user_client.get(f"/api/episodes/{episode.uuid}/frames?camera=extra&start=3&end=6")
    assert response.status_code == 200
    assert response["X-Frame-Steps"] == "3,4,5,6"
    lengths = [int(n) for n in response["X-Frame-Lengths"].split(",")]
    body = response.content
    assert len(body) == sum(lengths)
    names = episode.steps.filter(index__in=[3, 4, 5, 6]).order_by("index").values_list("frames__image", flat=True)
    expected = [default_storage.open(name).read() for name in names if name.endswith("_extra.png")]
    offsets = [sum(lengths[:i]) for i in range(4)]
    assert [body[o : o + n] for o, n in zip(offsets, lengths, strict=True)] == expected
    assert body[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("camera=top&start=0&end=1", "project cameras"),
        ("camera=main&start=5&end=1", "end must not"),
        ("camera=main&start=0&end=500", "at most 200"),
    ],
)
def test_frame_bundle_refuses_bad_queries(user_client, episode, query, message):
    response = user_client.get(f"/api/episodes/{episode.uuid}/frames?{query}")
    assert response.status_code == 400
    assert message in response.json()["detail"]
