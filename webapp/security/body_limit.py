"""Request bodies bounded before Django reads them.

Django's ASGI handler reads a request's whole body (spooled to a temporary file past 64 MiB) before any view,
parser or upload limit sees it: a request declaring a 10 GiB body made the web process read until the client
had sent it all, or hung on a client that never would. This ASGI middleware, in front of Django only (the fast
paths bound their own bodies), answers 413 at once when the declared `Content-Length` is past the limit, and
cuts a body sent without one (chunked) as soon as it grows past it:

- a JSON body (`Content-Type: application/json`): MAX_JSON_BODY_BYTES;
- any other body (multipart uploads on the import page, ingest chunks): MAX_REQUEST_BODY_BYTES.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestAborted

from webapp.common.asgi_http import HttpError, declared_length, header_map, respond_json


def body_limit(headers: dict[str, str]) -> tuple[int, str]:
    """The largest body this request may have, and the setting that says so."""
    if headers.get("content-type", "").split(";", 1)[0].strip().lower() == "application/json":
        return settings.MAX_JSON_BODY_BYTES, "MAX_JSON_BODY_BYTES"
    return settings.MAX_REQUEST_BODY_BYTES, "MAX_REQUEST_BODY_BYTES"


class BodyLimit:
    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, what = body_limit(header_map(scope))
        try:
            declared_length(header_map(scope), limit, what)
        except HttpError as exc:
            await respond_json(send, exc.status, {"detail": exc.detail})
            return
        received = 0

        async def bounded_receive() -> dict:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                await respond_json(send, 413, {"detail": f"body larger than {limit} bytes ({what})"})
                raise RequestAborted(f"body past {what}")  # Django's handler ends the request quietly
            return message

        await self.app(scope, bounded_receive, send)
