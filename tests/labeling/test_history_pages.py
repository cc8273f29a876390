"""An episode's change history comes a page at a time: `limit` changes, newest first, and `?before=<id>` the
older ones, so a long history can be read to its start; bad paging parameters are a 400 naming them."""

from __future__ import annotations

import pytest

from tests.labeling.factories import episode_with_frames

pytestmark = pytest.mark.django_db


def test_history_pages_walk_every_change_once_newest_first(user_client, project):
    episode = episode_with_frames(project=project, num_steps=12, size=16)
    url = f"/api/episodes/{episode.uuid}/frame-labels"
    for step in range(7):
        assert user_client.put(url, {"start": step, "value": "fail"}, "application/json").status_code == 200
    history = f"/api/episodes/{episode.uuid}/history"
    everything = user_client.get(history).json()
    assert [h["start"] for h in everything] == [6, 5, 4, 3, 2, 1, 0]

    seen, before, pages = [], None, 0
    while True:
        query = f"?limit=3&before={before}" if before else "?limit=3"
        page = user_client.get(history + query).json()
        if not page:
            break
        assert len(page) <= 3
        seen += page
        before, pages = page[-1]["id"], pages + 1
    assert [h["id"] for h in seen] == [h["id"] for h in everything] and pages == 3

    for bad in ("?limit=0", "?limit=1001", "?before=x", "?before=-1"):
        response = user_client.get(history + bad)
        assert response.status_code == 400, bad
        assert set(response.json()["errors"]) & {"limit", "before"}, response.json()
