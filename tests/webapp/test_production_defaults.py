"""Production defaults: DEBUG follows the bind address, HTTPS settings behind a proxy, rate-limit settings
checked at start, password validators, login throttling (django-axes), debug pages that never show
connection strings, and API rate limits answered with 429 and Retry-After."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ImproperlyConfigured, ValidationError

from tests.conftest import ROOT
from webapp import env

PROBE = (
    "import json, django; django.setup(); from django.conf import settings as s; print(json.dumps({"
    "'debug': s.DEBUG, 'secure_cookie': s.SESSION_COOKIE_SECURE, 'csrf_secure': s.CSRF_COOKIE_SECURE, "
    "'hsts': s.SECURE_HSTS_SECONDS, 'proxy': s.SECURE_PROXY_SSL_HEADER}))"
)


def _settings_with(**overrides: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "RS_HOST", "RS_HTTPS")}
    environ.update(DJANGO_SETTINGS_MODULE="webapp.settings", **overrides)
    out = subprocess.run([sys.executable, "-c", PROBE], env=environ, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_debug_defaults_on_only_when_bound_to_loopback(monkeypatch):
    for host, loopback in [("127.0.0.1", True), ("localhost", True), ("::1", True), ("0.0.0.0", False)]:
        monkeypatch.setenv("RS_HOST", host)
        assert env.bound_to_loopback() is loopback
    monkeypatch.delenv("RS_HOST")
    assert env.bound_to_loopback() is True  # the run command's default bind address


@pytest.mark.slow
def test_a_public_bind_turns_debug_off_and_https_settings_follow_the_proxy():
    public = _settings_with(RS_HOST="0.0.0.0", RS_HTTPS="1", SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto")
    assert public == {
        "debug": False,
        "secure_cookie": True,
        "csrf_secure": True,
        "hsts": 31_536_000,
        "proxy": ["HTTP_X_FORWARDED_PROTO", "https"],
    }


def test_rate_settings_are_checked(monkeypatch):
    monkeypatch.setenv("RS_RATE", "100/second")
    assert env.env_rate("RS_RATE", "") == "100/second"
    monkeypatch.setenv("RS_RATE", "")
    assert env.env_rate("RS_RATE", "5/minute") == ""  # empty turns the limit off
    monkeypatch.setenv("RS_RATE", "lots")
    with pytest.raises(ImproperlyConfigured, match="RS_RATE='lots' is not a rate"):
        env.env_rate("RS_RATE", "")


def test_weak_passwords_are_refused():
    for weak in ("short1", "password123", "1234567890123"):
        with pytest.raises(ValidationError):
            validate_password(weak)
    validate_password("violet-harbour-engine-42")


@pytest.mark.django_db
def test_a_wrong_host_header_shows_no_connection_strings(client, settings):
    settings.DEBUG = True
    settings.REDIS_URL = "redis://:hunter2@redis.internal:6379/3"
    response = client.get("/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    body = response.content.decode()
    assert "DisallowedHost" in body  # the debug page, shown because DEBUG is on
    assert "hunter2" not in body and "redis.internal" not in body


@pytest.mark.django_db
def test_repeated_failed_logins_lock_the_account_out(client, user, settings):
    settings.AXES_FAILURE_LIMIT = 3
    codes = [client.post("/accounts/login/", {"username": "alice", "password": "wrong"}).status_code for _ in range(3)]
    assert codes == [200, 200, 429]  # the form again with its error, then locked out at the limit
    locked = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-123"})
    assert locked.status_code == 429  # even the right password waits out the cool-off
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_the_api_rate_limit_answers_429_with_retry_after(user_client, settings):
    import redis

    from projects.gate.limits import KEY_PREFIX

    settings.API_RATE_LIMIT = "3/minute"
    store = redis.Redis.from_url(settings.REDIS_URL)
    try:
        codes = [user_client.get("/api/deployments/") for _ in range(4)]
        assert [r.status_code for r in codes] == [200, 200, 200, 429]
        assert int(codes[-1]["Retry-After"]) >= 1 and "throttled" in codes[-1].json()["detail"].lower()
    finally:
        for key in store.scan_iter(KEY_PREFIX + "*"):
            store.delete(key)


def test_tokens_never_reach_the_logs(caplog):
    import logging

    from webapp.security.log_filters import redact

    assert redact('127.0.0.1:5 - "GET /ws/teleop/agent/?token=rs_abc.DEF-1&x=2 HTTP/1.1" 403') == (
        '127.0.0.1:5 - "GET /ws/teleop/agent/?token=[redacted]&x=2 HTTP/1.1" 403'
    )
    assert redact("Authorization: Bearer rs_abc123") == "Authorization: Bearer [redacted]"
    access = logging.getLogger("uvicorn.access")
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        access.info('%s - "%s %s HTTP/%s" %d', "10.0.0.1:9", "GET", "/api/x?api_key=secret-1", "1.1", 200)
    assert "secret-1" not in caplog.text and "api_key=[redacted]" in caplog.text
