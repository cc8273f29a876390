"""The lock-out page in a browser: after LOGIN_FAILURE_LIMIT wrong passwords the app's own page says how long to
wait, counts down, and its link leads back to the login form."""

from __future__ import annotations

import os

import pytest

# Playwright's sync API runs an event loop in this thread; the ORM calls here are plain sync test code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_lock_out_page_shows_the_wait_and_leads_back_to_the_login(live_server_url, browser, screenshot_dir, user):
    from django.conf import settings

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    for _ in range(settings.AXES_FAILURE_LIMIT):
        page.goto(f"{live_server_url}/accounts/login/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "not her password")
        page.click("button[type=submit]")
    assert page.locator("#locked-out h1").inner_text() == "Too many failed logins"
    wait = page.inner_text("#wait")
    assert wait.endswith("seconds") and int(wait.split()[0]) <= settings.LOGIN_FIRST_DELAY_SECONDS
    page.wait_for_function(f"document.getElementById('wait').textContent !== {wait!r}", timeout=5000)  # counts down
    assert page.locator("nav.topbar a.brand").count() == 1  # the app's layout, not a bare text page
    page.screenshot(path=str(screenshot_dir / "login-locked-out.png"), full_page=True)
    page.click("#back-to-login")
    page.wait_for_url(f"{live_server_url}/accounts/login/")
    assert page.locator("input[name=password]").count() == 1
