"""Login lock-out per username with progressive delays: failures from many addresses add up on the username,
another username (the admin) behind the same address is not locked, the wait doubles with each further failure
and attempts refused while waiting do not extend it."""

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


def test_failures_from_many_addresses_add_up_on_the_username(client, user, lockout):
    codes = [_post(client, "alice", "wrong", f"198.51.100.{i}") for i in range(3)]
    assert codes == [200, 200, 429]
    assert _post(client, "alice", "pw-alice-123", "203.0.113.9") == 429  # a new address does not help


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
