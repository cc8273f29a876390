"""API docs work air-gapped: Swagger UI and Redoc load from the app itself with every other host blocked."""

from __future__ import annotations

import os
from urllib.parse import urlparse

import pytest

from tests.conftest import login

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _offline_page(browser, blocked: list[str]):
    """A page whose requests to any host but 127.0.0.1 are aborted (and listed in `blocked`). Local
    requests are not intercepted at all, so they behave exactly as without the route."""
    context = browser.new_context()

    def abort(route, request):
        blocked.append(request.url)
        route.abort()

    context.route(lambda url: urlparse(url).hostname != "127.0.0.1", abort)
    return context.new_page()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_swagger_and_redoc_list_operations_without_network(browser, live_server_url, user):
    blocked: list[str] = []
    page = _offline_page(browser, blocked)
    login(page, live_server_url, "alice", "pw-alice-123")

    page.goto(f"{live_server_url}/api/docs/")
    page.wait_for_selector(".opblock", timeout=20_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any("/api/episodes" in p for p in paths), paths
    assert len(paths) > 10

    page.goto(f"{live_server_url}/api/redoc/")
    page.wait_for_selector("[data-section-id^='operation/']", timeout=20_000)
    assert page.locator("[data-section-id^='operation/']").count() > 10
    assert blocked == [], f"the docs asked for other hosts: {blocked}"
