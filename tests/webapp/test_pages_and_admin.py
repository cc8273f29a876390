"""Login, the home page, the admin and the API docs, as a person sees them."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.core.management import call_command

from labeling.models import FrameLabel
from projects.models import Agent
from projects.tokens import hash_token

pytestmark = pytest.mark.django_db


def test_anonymous_people_are_sent_to_the_login(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b'name="password"' in page.content


def test_the_home_page_lists_projects_with_their_counts(client, project):
    from webapp.demo.generated import seed_generated_episodes

    seed_generated_episodes(project=project, episodes=2, steps=5, size=16)
    client.post("/accounts/login/", {"username": "x", "password": "y"})
    from django.contrib.auth import get_user_model

    bob = get_user_model().objects.create_user("bob", password="pw-bob-123")
    project.memberships.create(user=bob, role="annotator")  # people see the projects they are members of
    assert client.login(username="bob", password="pw-bob-123")
    html = client.get("/").content.decode()
    assert "PickCube" in html
    row = html[html.index("PickCube") :]
    cells = [c.split("</td>")[0].strip() for c in row.split("<td>")[1:5]]
    assert cells == ["2", "10", "10", "0"]  # episodes, steps (2 x 5), human frame labels, window labels
    assert FrameLabel.objects.count() == 10


def test_the_home_page_has_an_empty_state(user_client):
    assert "No projects yet" in user_client.get("/").content.decode()


def test_every_model_is_in_the_admin_and_its_pages_load(client, admin_user, project, agent_token):
    from django.apps import apps

    client.force_login(admin_user)
    for app_label in ("labeling", "training", "inference", "webhooks"):
        for model in apps.get_app_config(app_label).get_models():
            assert model in admin.site._registry, f"{model.__name__} is not registered in the admin"
            opts = model._meta
            response = client.get(f"/admin/{opts.app_label}/{opts.model_name}/?q=x")
            assert response.status_code == 200, f"{opts.label} changelist: {response.status_code}"


def test_an_admin_creates_an_agent_and_sees_its_token_once(client, admin_user):
    client.force_login(admin_user)
    response = client.post(
        "/admin/projects/agent/add/", {"name": "franka-1", "kind": "robot", "is_active": "on"}, follow=True
    )
    assert response.status_code == 200
    message = next(str(m) for m in response.context["messages"] if "franka-1" in str(m))
    token = message.rsplit(" ", 1)[1]
    agent = Agent.objects.get(name="franka-1")
    assert agent.token_hash == hash_token(token) and token.startswith(agent.token_prefix)


def test_the_create_agent_command_prints_a_working_token(capsys, client):
    call_command("create_agent", "rl-worker-1", "--kind", "rl_worker")
    token = capsys.readouterr().out.strip()
    response = client.get("/api/schema/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="exists"):
        call_command("create_agent", "rl-worker-1")
    call_command("create_agent", "rl-worker-1", "--rotate")
    assert client.get("/api/schema/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 401


def test_the_openapi_schema_describes_the_ingest_api(user_client):
    response = user_client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in ("/api/episodes", "/api/episodes/{uuid}/steps", "/api/episodes/{uuid}/finish"):
        assert path in paths
    assert user_client.get("/api/docs/").status_code == 200


def test_stored_files_are_only_served_to_people_who_logged_in(client, user, project):
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    name = default_storage.save(f"frames/{project.pk}/test/x.txt", ContentFile(b"hello"))
    assert client.get(f"/media/{name}").status_code == 302
    client.force_login(user)
    response = client.get(f"/media/{name}")
    assert response.content == b"hello" and "max-age" in response["Cache-Control"]
    assert client.get("/media/frames/../../etc/passwd").status_code == 404


def test_setup_demo_is_idempotent(settings, tmp_path, capsys):
    settings.DATA_DIR = tmp_path
    settings.RS_PORT = 8765
    call_command("setup_demo", "--episodes", "2", "--placeholder")
    first = capsys.readouterr().out
    assert "Log in as: admin /" in first and "http://127.0.0.1:8765/" in first
    call_command("setup_demo", "--episodes", "2", "--placeholder")
    from labeling.models import Episode

    assert Episode.objects.count() == 2
    password = (tmp_path / "admin_password.txt").read_text().strip()
    assert password in first and password in capsys.readouterr().out
