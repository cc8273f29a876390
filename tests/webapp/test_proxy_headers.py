"""Behind a reverse proxy: the client's address (for TRUSTED_CIDRS and the rate limits) comes from
X-Forwarded-For only when the TCP peer is a proxy listed in FORWARDED_ALLOW_IPS; anyone else's header is
ignored, also on loopback, where uvicorn's own default would believe it (the Procfile turns that off)."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import requests
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.core.exceptions import ImproperlyConfigured

from tests.conftest import ROOT, _stop, _wait_for_port, free_port
from webapp import env
from webapp.security.proxy_headers import behind_proxies

PROXY = "192.0.2.10"  # the reverse proxy's address
STRANGER = "203.0.113.5"  # a client that reaches the app directly


def _client_address() -> str:
    """A fresh address in the RL network (10.0.0.0/8), so rate-limit counters of earlier runs do not count."""
    return "10." + ".".join(str(random.randrange(256)) for _ in range(3))


def _get(app, path: str, *, peer: str, forwarded_for: str | None = None) -> int:
    headers = [(b"host", b"testserver")]
    if forwarded_for:
        headers.append((b"x-forwarded-for", forwarded_for.encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": (peer, 40000),
        "server": ("127.0.0.1", 8000),
    }

    async def call() -> int:
        communicator = ApplicationCommunicator(app, scope)
        await communicator.send_input({"type": "http.request", "body": b""})
        start = await communicator.receive_output(timeout=60)
        while (await communicator.receive_output(timeout=60)).get("more_body"):
            pass
        return start["status"]

    return async_to_sync(call)()


@pytest.fixture
def app(settings):
    """The ASGI application as webapp.asgi builds it, the RL network trusted for tokenless requests."""
    from webapp.asgi import application

    settings.TRUSTED_CIDRS = ["10.0.0.0/8"]
    return application


def test_with_no_proxy_configured_a_forwarded_header_is_ignored(app, settings):
    assert settings.FORWARDED_ALLOW_IPS == []  # the default: the TCP peer is the client
    for peer in (STRANGER, "127.0.0.1"):  # loopback too: uvicorn's default would believe it
        assert _get(app, "/health", peer=peer, forwarded_for=_client_address()) == 401
    assert _get(app, "/health", peer=_client_address()) in (200, 503)  # a trusted peer needs no token


def test_a_configured_proxy_names_the_client_for_trusted_networks(app):
    proxied = behind_proxies(app, [PROXY])
    assert _get(proxied, "/health", peer=PROXY, forwarded_for=_client_address()) in (200, 503)
    assert _get(proxied, "/health", peer=PROXY, forwarded_for=STRANGER) == 401
    assert _get(proxied, "/health", peer=PROXY) == 401  # no header: the proxy itself, not a trusted network
    # a client of the proxy that sends its own header: the proxy appends the address it saw, which counts
    assert _get(proxied, "/health", peer=PROXY, forwarded_for=f"{_client_address()}, {STRANGER}") == 401
    assert _get(proxied, "/health", peer=STRANGER, forwarded_for=_client_address()) == 401  # not the proxy


def test_a_configured_proxy_names_the_client_for_rate_limits(app, settings):
    settings.API_RATE_LIMIT = "1/minute"
    settings.TRUSTED_RATE_LIMIT = "1/minute"  # tokenless callers of a trusted network have their own limit
    proxied = behind_proxies(app, [PROXY])
    first, second = _client_address(), _client_address()
    assert _get(proxied, "/health", peer=PROXY, forwarded_for=first) in (200, 503)
    assert _get(proxied, "/health", peer=PROXY, forwarded_for=second) in (200, 503)  # its own budget
    assert _get(proxied, "/health", peer=PROXY, forwarded_for=first) == 429


def test_the_setting_lists_networks_and_refuses_anything_else(monkeypatch):
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", " 192.0.2.10, 10.1.0.0/16 ")
    assert env.env_cidrs("FORWARDED_ALLOW_IPS", []) == ["192.0.2.10/32", "10.1.0.0/16"]
    for bad in ("*", "proxy.internal"):
        monkeypatch.setenv("FORWARDED_ALLOW_IPS", bad)
        with pytest.raises(ImproperlyConfigured, match="FORWARDED_ALLOW_IPS"):
            env.env_cidrs("FORWARDED_ALLOW_IPS", [])


@pytest.mark.slow
def test_the_procfile_web_process_ignores_a_spoofed_header_on_loopback(process_env):
    """uvicorn believes X-Forwarded-For from 127.0.0.1 unless told not to: the Procfile's web line says so."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from supervisor_conf import procfile_parse

    web = dict(procfile_parse((ROOT / "Procfile").read_text()))["web"]
    port = free_port()
    bin_dir = os.path.dirname(sys.executable)
    environment = {
        **process_env,
        "PATH": f"{bin_dir}:{process_env['PATH']}",
        "RS_HOST": "127.0.0.1",
        "RS_PORT": str(port),
        "TRUSTED_CIDRS": "10.0.0.0/8",
    }
    environment.pop("FORWARDED_ALLOW_IPS", None)
    log = open(ROOT / "artifacts" / f"uvicorn-procfile-{port}.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(["bash", "-c", f"exec {web}"], cwd=ROOT, env=environment, stdout=log, stderr=log)
    try:
        _wait_for_port(port, proc)
        url = f"http://127.0.0.1:{port}/health"
        assert requests.get(url, headers={"X-Forwarded-For": _client_address()}, timeout=120).status_code == 401
    finally:
        _stop(proc)
        log.close()
