"""What every visitor meets before any feature: the tab's icon, the admin's names and the API docs' door."""

from __future__ import annotations

import re

import pytest
from django.apps import apps


@pytest.mark.django_db
def test_the_favicon_is_served_from_the_site_root_and_linked_from_every_page(client, user_client):
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200 and icon["Content-Type"] in {"image/x-icon", "image/vnd.microsoft.icon"}
    assert b"".join(icon.streaming_content)[:4] == b"\x00\x00\x01\x00"  # an ICO header
    svg = client.get("/favicon.svg")
    assert svg.status_code == 200 and svg["Content-Type"].startswith("image/svg+xml")
    assert '<link rel="icon" href="/favicon.svg"' in user_client.get("/").content.decode()


def test_no_model_is_named_with_a_made_up_plural():
    wrong = [
        (model._meta.label, str(model._meta.verbose_name_plural))
        for model in apps.get_models()
        if re.search(r"[^aeiou]ys$|(ss|x|ch|sh)s$", str(model._meta.verbose_name_plural))
    ]
    assert wrong == []


@pytest.mark.django_db
def test_the_admin_index_says_label_efficiencies(admin_client):
    html = admin_client.get("/admin/").content.decode()
    assert "Label efficiencies" in html and "Retrain policies" in html and "Webhook deliveries" in html
    assert "efficiencys" not in html and "policys" not in html and "deliverys" not in html


@pytest.mark.django_db
def test_logged_out_the_api_docs_send_the_browser_to_the_login_page_and_back(client, user):
    for path in ("/api/docs/", "/api/redoc/"):
        answer = client.get(path)
        assert answer.status_code == 302 and answer["Location"] == f"/accounts/login/?next={path}"
    assert client.get("/api/schema/").status_code == 401  # the schema is an API answer, not a page
    login = client.post("/accounts/login/?next=/api/docs/", {"username": "alice", "password": "pw-alice-123"})
    assert login.status_code == 302 and login["Location"] == "/api/docs/"
    assert client.get("/api/docs/").status_code == 200
