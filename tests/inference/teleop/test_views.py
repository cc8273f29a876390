"""Teleop pages and the sessions API."""

import uuid

import pytest

from inference.teleop.models import TeleopSession
from labeling.ingest.services import episode_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(project, agent_token):
    row = TeleopSession.objects.create(agent=agent_token[0], project=project, deployment_name="pickcube-resnet",
                                       cameras=["main", "extra"], step_count=42, dropped_frames=3)  # fmt: skip
    episode, _ = episode_create(project=project, uuid=uuid.uuid4(), agent=agent_token[0])
    row.episodes.add(episode)
    return row


def test_pages_need_a_login(client, session):
    for url in ("/teleop/", f"/teleop/{session.pk}/"):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert client.get("/api/teleop/sessions/").status_code in (401, 403)


def test_the_session_list_links_each_episode_to_its_labeling_page(user_client, session):
    html = user_client.get("/teleop/").content.decode()
    episode = session.episodes.get()
    assert f'href="/teleop/{session.pk}/"' in html
    assert f'href="/episodes/{episode.uuid}/label/"' in html
    assert "pickcube-resnet" in html


def test_the_dashboard_page_carries_what_its_script_needs(user_client, session):
    response = user_client.get(f"/teleop/{session.pk}/")
    assert response.status_code == 200
    data = response.context["page_data"]
    assert data["wsPath"] == f"/ws/teleop/sessions/{session.pk}/"
    assert data["cameras"] == ["main", "extra"] and data["threshold"] == 0.5
    assert b"pages/teleop_dashboard.js" in response.content
    assert user_client.get("/teleop/999999/").status_code == 404


def test_the_api_lists_sessions_live_first_filterable(user_client, agent_client, session, project, agent_token):
    TeleopSession.objects.create(agent=agent_token[0], project=project, is_live=False)
    rows = user_client.get("/api/teleop/sessions/").json()
    rows = rows["results"] if isinstance(rows, dict) else rows
    assert len(rows) == 2
    live = user_client.get("/api/teleop/sessions/?live=1").json()
    live = live["results"] if isinstance(live, dict) else live
    assert [r["id"] for r in live] == [session.pk]
    assert live[0]["episodes"] == [str(session.episodes.get().uuid)] and live[0]["dropped_frames"] == 3
    assert agent_client.get("/api/teleop/sessions/").status_code == 200


def test_sessions_are_in_the_admin(admin_user, client, session):
    client.force_login(admin_user)
    response = client.get("/admin/teleop/teleopsession/")
    assert response.status_code == 200 and b"pickcube-resnet" in response.content
