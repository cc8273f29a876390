"""Typed settings helpers fail loudly on bad values."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp import env


def test_booleans_accept_the_usual_spellings(monkeypatch):
    for raw, expected in [("1", True), ("yes", True), ("On", True), ("0", False), ("false", False), ("", False)]:
        monkeypatch.setenv("RS_FLAG", raw)
        assert env.env_bool("RS_FLAG", not expected) is expected
    monkeypatch.delenv("RS_FLAG")
    assert env.env_bool("RS_FLAG", True) is True


def test_a_bad_boolean_or_integer_stops_start_up(monkeypatch):
    monkeypatch.setenv("RS_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="RS_FLAG='maybe' is not a boolean"):
        env.env_bool("RS_FLAG", False)
    monkeypatch.setenv("RS_NUMBER", "12px")
    with pytest.raises(ImproperlyConfigured, match="not an integer"):
        env.env_int("RS_NUMBER", 1)
    monkeypatch.setenv("RS_NUMBER", "3")
    with pytest.raises(ImproperlyConfigured, match="at least 16"):
        env.env_int("RS_NUMBER", 100, minimum=16)


def test_lists_and_the_secret_key(monkeypatch, tmp_path):
    monkeypatch.setenv("RS_HOSTS", " a.example , b.example,,")
    assert env.env_list("RS_HOSTS", []) == ["a.example", "b.example"]
    monkeypatch.delenv("RS_SECRET", raising=False)
    keep = tmp_path / "sub" / "secret.txt"
    first = env.secret_key("RS_SECRET", keep)
    assert len(first) > 40 and env.secret_key("RS_SECRET", keep) == first  # generated once, then kept
    monkeypatch.setenv("RS_SECRET", "from-env")
    assert env.secret_key("RS_SECRET", keep) == "from-env"


def test_printed_addresses_follow_rs_host_and_port(settings):
    from webapp.addresses import app_url

    settings.RS_HOST, settings.RS_PORT = "0.0.0.0", 8123
    assert app_url("/teleop/") == "http://127.0.0.1:8123/teleop/"
    settings.RS_HOST = "studio.lab"
    assert app_url() == "http://studio.lab:8123/"
    settings.RS_HOST = "::1"
    assert app_url("") == "http://[::1]:8123"
