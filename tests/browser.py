"""Browser steps shared by the browser tests and bench/labeling.py (no fixtures, no side effects on import)."""

from __future__ import annotations


def login(page, base_url: str, username: str, password: str) -> None:
    """Sign in through the login page and wait for the home page."""
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
