"""Login lock-out per username at an address with progressive delays: failures elsewhere do not lock a person
out, another username (the admin) behind the same address is not locked, the wait doubles with each further
failure and attempts refused while waiting do not extend it; the lock-out page says how long and links back to
the login; `manage.py check` no longer warns that the lock-out ignores the address (axes.W006)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt

from webapp.security.login_lockout import lockout_delay_s

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


@pytest.fixture
def lockout(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.LOGIN_FIRST_DELAY_SECONDS = 30
    settings.LOGIN_COOLOFF_MINUTES = 15


def _post(client, username, password, address):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address).status_code


def _rewind(username: str, seconds: float) -> None:
    """The username's last failure `seconds` earlier: time passing, without sleeping."""
    for attempt in AccessAttempt.objects.filter(username=username):
        attempt.attempt_time -= timedelta(seconds=seconds)
        attempt.save(update_fields=["attempt_time"])


def test_the_delay_starts_at_the_limit_doubles_and_is_capped():
    delays = [lockout_delay_s(n, limit=3, first_s=30, max_s=900) for n in range(1, 10)]
    assert delays == [0, 0, 30, 60, 120, 240, 480, 900, 900]
    assert lockout_delay_s(10**6, limit=3, first_s=30, max_s=900) == 900


def test_failures_elsewhere_do_not_lock_the_person_out_at_their_own_address(client, user, lockout):
    assert [_post(client, "alice", "wrong", "198.51.100.1") for _ in range(3)][-1] == 429  # someone guessing
    assert _post(client, "alice", "pw-alice-123", "198.51.100.1") == 429  # the right password too, there
    assert _post(client, "alice", "pw-alice-123", "203.0.113.9") == 302  # alice at her own address


def test_a_shared_address_does_not_lock_the_admin_out(client, user, admin_user, lockout):
    shared = "192.0.2.10"
    assert [_post(client, "alice", "wrong", shared) for _ in range(5)][-1] == 429
    assert _post(client, "admin", "pw-admin-123", shared) == 302
    assert "_auth_user_id" in client.session


def test_the_wait_passes_then_doubles_and_refused_attempts_do_not_extend_it(client, user, lockout):
    address = "198.51.100.7"
    assert [_post(client, "alice", "wrong", address) for _ in range(3)][-1] == 429
    for _ in range(5):  # hammering while locked: refused and not counted
        assert _post(client, "alice", "wrong", address) == 429
    assert sum(AccessAttempt.objects.filter(username="alice").values_list("failures_since_start", flat=True)) == 3
    _rewind("alice", 31)  # the first wait (30 s) is over: one more try
    assert _post(client, "alice", "wrong", address) == 429  # failure 4: now 60 s
    _rewind("alice", 31)
    assert _post(client, "alice", "pw-alice-123", address) == 429  # still waiting: half of 60 s passed
    _rewind("alice", 30)
    assert _post(client, "alice", "pw-alice-123", address) == 302  # slowed, never closed
    assert not AccessAttempt.objects.filter(username="alice").exists()  # forgotten at a successful login


def test_the_lock_out_page_says_the_wait_and_links_back_to_the_login(client, user, lockout):
    address = "198.51.100.20"
    for _ in range(3):
        refused = client.post(LOGIN, {"username": "alice", "password": "wrong"}, REMOTE_ADDR=address)
    # The wait counts from the failed attempt's start: under load its password check alone can take seconds.
    wait = int(refused["Retry-After"])
    assert refused.status_code == 429 and 24 <= wait <= 30
    page = refused.content.decode()
    assert "Too many failed logins" in page and '<link rel="stylesheet"' in page  # the app's page (base.html)
    assert f'Try again in <strong id="wait">{wait} seconds</strong>' in page
    assert 'href="/accounts/login/"' in page and "Back to the login" in page
    _rewind("alice", 20)
    again = client.post(LOGIN, {"username": "alice", "password": "pw-alice-123"}, REMOTE_ADDR=address)
    left = int(again["Retry-After"])
    assert again.status_code == 429 and 4 <= left <= 10  # the time left, not the whole wait
    assert f"{left} seconds" in again.content.decode()


def test_manage_py_check_prints_no_lockout_warning():
    import subprocess
    import sys

    from tests.conftest import ROOT

    checked = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert checked.returncode == 0, checked.stderr
    assert "W006" not in checked.stdout + checked.stderr and "axes" not in checked.stdout + checked.stderr
