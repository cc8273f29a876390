"""GET handlers never write: every page and API a GET reaches (the access matrix's GET rows, plus the
health checks) runs no INSERT, UPDATE or DELETE. Asked by a member of the project (a site admin where
only admins may), with a session; the world is the access matrix's, rolled back at the end."""

from __future__ import annotations

import re

import pytest
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.webapp.test_access_matrix import MATRIX, Case, _ask, build_world

WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|TRUNCATE|CREATE|ALTER|DROP)\b", re.IGNORECASE)
EXTRA = {
    "healthz": [Case("GET", "/healthz", set())],
    "health": [Case("GET", "/health", set())],
    "metrics": [Case("GET", "/metrics", set())],
}
GETS = [(route, case) for route, cases in {**MATRIX, **EXTRA}.items() for case in cases if case.method == "GET"]


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    from django.contrib.auth import get_user_model

    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            data = build_world(get_user_model())
            data["clients"] = {}
            for name in ("manager", "admin"):
                data["clients"][name] = Client()
                data["clients"][name].force_login(data["people"][name])
            yield data
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@pytest.mark.django_db  # so the test database is set up when this module runs alone
@pytest.mark.parametrize(("route", "case"), GETS, ids=[f"GET {r or '/'}" for r, _ in GETS])
def test_a_get_request_writes_nothing(world, route, case):
    from inference.serving import forget_deployment

    forget_deployment(world["ids"]["deployment"])
    forget_deployment(world["ids"]["vlm_deployment"])
    caller = "manager" if "manager" in case.allow else "admin"
    with CaptureQueriesContext(connection) as queries:
        response = _ask(world["clients"][caller], case, world["ids"])
    assert response.status_code < 500 or route in EXTRA, response.status_code  # health: 503 without a worker
    if case.allow:
        assert response.status_code not in (401, 403, 404), f"{caller} was refused {route}"
    writes = [q["sql"] for q in queries.captured_queries if WRITE.match(q["sql"])]
    assert writes == [], f"GET {route} wrote: {writes}"


@pytest.mark.django_db
def test_the_monitor_shows_defaults_until_the_first_settings_save_makes_its_row(world):
    from inference.models import DeploymentMonitor

    name, client = world["ids"]["deployment"], world["clients"]["manager"]
    with transaction.atomic():
        page = client.get(f"/deployments/{name}/monitor")
        health = client.get(f"/api/deployments/{name}/health").json()
        assert page.status_code == 200 and 'value="0.3"' in page.content.decode()
        assert (health["alarm"], health["false_success_threshold"]) == (False, 0.3)
        assert not DeploymentMonitor.objects.filter(deployment__name=name).exists()
        settings = {"enabled": "on", "false_success_threshold": "0.4", "hold_s": "30", "window_s": "60"}
        saved = client.post(f"/deployments/{name}/monitor", {**settings, "min_items": "20"})
        assert saved.status_code == 302
        row = DeploymentMonitor.objects.get(deployment__name=name)
        assert (row.false_success_threshold, row.hold_s) == (0.4, 30.0)
        assert client.get(f"/api/deployments/{name}/health").json()["false_success_threshold"] == 0.4
        transaction.set_rollback(True)
