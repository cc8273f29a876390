"""Starting a project in the app: name, task and cameras; the creator manages it; bad names and cameras are
refused with the reason."""

from __future__ import annotations

import pytest

from projects.models import Membership, Project


@pytest.mark.django_db
def test_a_person_creates_a_project_and_manages_it(user_client, user):
    home = user_client.get("/").content.decode()
    assert 'id="new-project"' in home and "Ask an admin" not in home
    response = user_client.post(
        "/projects/new/", {"name": "Drawer", "task_description": "Open the drawer.", "cameras": "wrist, front"}
    )
    project = Project.objects.get(name="Drawer")
    assert response.status_code == 302 and response["Location"] == f"/projects/{project.pk}/"
    assert project.camera_views == ["wrist", "front"] and project.task_description == "Open the drawer."
    assert Membership.objects.get(project=project, user=user).role == "manager"
    assert user_client.get(f"/projects/{project.pk}/").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("cameras", "message"),
    [
        ("", "This field is required"),
        ("main main", "each camera once"),
        ("main, wrist/left", "letters, digits, - and _"),
        (", ".join(f"c{i}" for i in range(9)), "at most 8 cameras"),
    ],
)
def test_bad_cameras_are_refused_with_the_reason(user_client, cameras, message):
    response = user_client.post("/projects/new/", {"name": "X", "cameras": cameras})
    assert response.status_code == 400 and message in response.content.decode()
    assert not Project.objects.filter(name="X").exists()


@pytest.mark.django_db
def test_a_taken_name_is_refused(user_client, project):
    response = user_client.post("/projects/new/", {"name": project.name, "cameras": "main"})
    assert response.status_code == 400 and "already exists" in response.content.decode()
    assert Project.objects.filter(name=project.name).count() == 1


def test_anonymous_callers_are_sent_to_log_in(client):
    assert client.get("/projects/new/")["Location"].startswith("/accounts/login/")
