"""Two people label one episode: an edit names the value it was based on; a stale one gets a 409 with
the current value and its author, nothing is saved; an undo based on an old value never reverts the other
person's change; an edit without a base still overwrites (agents, scripts)."""

from __future__ import annotations

import pytest
from django.test import Client

from labeling.models import FrameLabel, WindowLabel
from projects.models import Membership
from tests.labeling.factories import episode_with_frames


@pytest.fixture
def two_people(project, user, django_user_model):
    """alice (the project's manager, from the `project` fixture) and bob, a reviewer of the project (an
    annotator may not change other people's labels at all: labeling.labels.ownership.require_may_change_labels)."""
    bob = django_user_model.objects.create_user("bob", "bob@example.org", "pw-bob-123")
    Membership.objects.create(project=project, user=bob, role=Membership.Role.REVIEWER)
    people = []
    for person in (user, bob):
        client = Client()
        client.force_login(person)
        people.append(client)
    return people


def _frames(client, episode, body):
    return client.put(f"/api/episodes/{episode.uuid}/frame-labels", body, "application/json")


@pytest.mark.django_db
def test_a_stale_frame_edit_is_refused_with_the_current_value(project, two_people):
    alice, bob = two_people
    episode = episode_with_frames(project=project, num_steps=6, size=8)
    assert _frames(alice, episode, {"items": [{"index": 2, "value": "success", "base": None}]}).status_code == 200

    stale = _frames(
        bob,
        episode,
        {"items": [{"index": 1, "value": "fail", "base": None}] + [{"index": 2, "value": "fail", "base": None}]},
    )
    assert stale.status_code == 409
    assert stale.json()["conflicts"] == [{"start": 2, "end": 2, "base": None, "current": "success", "by": "alice"}]
    assert "step 2 changed since you saw it (alice set success)" in stale.json()["detail"]
    stored = dict(FrameLabel.objects.filter(source="human").values_list("step__index", "value"))
    assert stored == {2: "success"}  # all or nothing: step 1 was not written either

    # bob keeps his value knowingly (base: what he was shown in the conflict)
    assert _frames(bob, episode, {"start": 1, "end": 2, "value": "fail", "base": None}).status_code == 409
    assert _frames(bob, episode, {"items": [{"index": 2, "value": "fail", "base": "success"}]}).status_code == 200
    # alice's undo (back to no label, based on her success) does not revert bob's change
    undo = _frames(alice, episode, {"items": [{"index": 2, "value": None, "base": "success"}]})
    assert undo.status_code == 409 and undo.json()["conflicts"][0]["by"] == "bob"
    assert FrameLabel.objects.get(step__index=2, source="human").value == "fail"
    # the same value as the other person is no conflict; no base at all overwrites (last write wins)
    assert _frames(alice, episode, {"items": [{"index": 2, "value": "fail", "base": None}]}).status_code == 200
    assert _frames(alice, episode, {"start": 2, "value": "success"}).status_code == 200


@pytest.mark.django_db
def test_a_stale_window_edit_is_refused(project, two_people):
    alice, bob = two_people
    episode = episode_with_frames(project=project, num_steps=8, size=8)
    url = f"/api/episodes/{episode.uuid}/window-labels"
    assert (
        alice.post(url, {"start": 0, "end": 3, "value": "positive", "base": None}, "application/json").status_code
        == 200
    )
    stale = bob.post(url, {"start": 0, "end": 3, "value": "negative", "base": None}, "application/json")
    assert stale.status_code == 409
    assert stale.json()["conflicts"] == [{"start": 0, "end": 3, "base": None, "current": "positive", "by": "alice"}]
    assert WindowLabel.objects.get(source="human").value == "positive"
    taken = bob.post(url, {"start": 0, "end": 3, "value": "negative", "base": "positive"}, "application/json")
    assert taken.status_code == 200 and WindowLabel.objects.get(source="human").value == "negative"
