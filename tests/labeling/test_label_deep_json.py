"""The frame-label, window-label and proposal endpoints read JSON with the bounded parser like every other
API view: 5,000 levels of nesting is a 400 naming JSON_MAX_DEPTH, unparsed (it was a 500 through Python's
recursion limit), and a body that parses still reaches the view's own validation."""

from __future__ import annotations

import pytest

from labeling.models import Episode

pytestmark = pytest.mark.django_db

DEEP = '{"items": ' + "[" * 5000 + "]" * 5000 + "}"


def label_paths(project) -> list[tuple[str, str]]:
    episode = Episode.objects.create(project=project, num_steps=4)
    return [
        ("put", f"/api/episodes/{episode.uuid}/frame-labels"),
        ("post", f"/api/episodes/{episode.uuid}/window-labels"),
        *[
            ("post", f"/api/projects/{project.pk}/proposals/{action}")
            for action in ("generate", "accept", "reject", "reopen")
        ],
    ]


def test_json_nested_5000_deep_is_a_400_on_every_label_and_proposal_endpoint(agent_client, project):
    for method, path in label_paths(project):
        answer = getattr(agent_client, method)(path, data=DEEP, content_type="application/json")
        assert answer.status_code == 400, (path, answer.status_code, answer.content[:200])
        assert "nests 5001 levels deep; the limit is 64 (JSON_MAX_DEPTH)" in answer.json()["detail"], path


def test_shallow_bodies_still_reach_the_views_validation(agent_client, project):
    for method, path in label_paths(project):
        answer = getattr(agent_client, method)(path, data='{"items": "no"}', content_type="application/json")
        assert answer.status_code in (200, 202, 400), (path, answer.status_code)
        assert "JSON_MAX_DEPTH" not in answer.content.decode(), path
