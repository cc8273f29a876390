"""Bodies bound for Django are bounded before Django reads them (webapp.security.body_limit): a declared length past
the limit is answered 413 without reading a byte, and a body sent without one is cut as soon as it grows past
it; bodies within the limit reach Django whole. Also against the live server: a POST declaring 10 GiB."""

from __future__ import annotations

import asyncio
import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.exceptions import RequestAborted

from webapp.security.body_limit import BodyLimit


class FakeDjango:
    """Reads the whole body as Django's ASGI handler does (ending quietly on RequestAborted), answers 200."""

    def __init__(self):
        self.read = b""

    async def __call__(self, scope, receive, send):
        try:
            while True:
                message = await receive()
                self.read += message.get("body", b"")
                if not message.get("more_body"):
                    break
        except RequestAborted:
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def run(headers: dict[str, str], pieces: list[bytes], path: str = "") -> tuple[int, Any, FakeDjango, int]:
    app, sent, given = FakeDjango(), [], []
    queue = [{"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)]

    async def receive():
        given.append(1)
        return queue.pop(0)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(BodyLimit(app)(scope, receive, send))
    status, body = sent[0]["status"], sent[1]["body"]
    return status, (json.loads(body) if status != 200 else body), app, len(given)


def test_a_declared_length_past_the_limit_is_refused_before_reading(settings):
    settings.MAX_JSON_BODY_BYTES, settings.MAX_REQUEST_BODY_BYTES = 1000, 5000
    status, body, app, reads = run({"content-type": "application/json", "content-length": "1001"}, [b"x" * 1001])
    assert (status, reads, app.read) == (413, 0, b"") and "MAX_JSON_BODY_BYTES" in body["detail"]
    status, body, _, reads = run({"content-type": "multipart/form-data; b=1", "content-length": "5001"}, [b""])
    assert (status, reads) == (413, 0) and "MAX_REQUEST_BODY_BYTES" in body["detail"]
    status, body, app, _ = run({"content-type": "multipart/form-data; b=1", "content-length": "4000"}, [b"y" * 4000])
    assert (status, body, app.read) == (200, b"ok", b"y" * 4000)  # a JSON limit does not apply to it


def test_a_body_without_a_length_is_cut_once_it_grows_past_the_limit(settings):
    settings.MAX_JSON_BODY_BYTES = 1000
    status, body, app, reads = run({"content-type": "application/json"}, [b"[" * 600, b"[" * 600, b"]" * 1200])
    assert status == 413 and reads == 2 and "body larger than 1000 bytes" in body["detail"]
    status, body, app, _ = run({"content-type": "application/json"}, [b"[" * 400, b"]" * 400])
    assert (status, app.read) == (200, b"[" * 400 + b"]" * 400)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_live_server_answers_a_10_gib_declaration_at_once(live_server_url):
    conn = http.client.HTTPConnection(urlsplit(live_server_url).netloc, timeout=30)
    try:
        conn.putrequest("POST", "/api/deployments/nope/rewards")  # JSON: Django's, not a fast path
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(10 << 30))
        conn.endheaders()
        conn.send(b"[" * 65536)
        response = conn.getresponse()
        assert response.status == 413 and b"MAX_JSON_BODY_BYTES" in response.read()
    finally:
        conn.close()
