"""Request bodies bounded before Django reads them.

Django's ASGI handler reads a request's whole body (spooled to a temporary file past 64 MiB) before any view,
parser or upload limit sees it: a request declaring a 10 GiB body made the web process read until the client
had sent it all, or hung on a client that never would. This ASGI middleware, in front of Django only (the fast
paths bound their own bodies), answers 413 at once when the declared `Content-Length` is past the limit, and
cuts a body sent without one (chunked) as soon as it grows past it:

- a JSON body (`Content-Type: application/json`): MAX_JSON_BODY_BYTES, and INGEST_JSON_CHUNK_MAX_BYTES for a JSON
  step chunk (`POST /api/episodes/<uuid>/steps`; its step fields are then held to CHUNK_HEADER_MAX_BYTES by the view);
- any other body (multipart uploads on the import page, ingest chunks): MAX_REQUEST_BODY_BYTES;
- a body sent with neither an `Authorization` header nor a session cookie (anonymous: only the login form has a
  use for a body): ANONYMOUS_BODY_MAX_BYTES, answered 401 rather than 413, since signing in is what is missing.
  A caller with credentials that turn out to be wrong still gets its 401 after the body (the check needs Django).
"""

from __future__ import annotations

import re
from http.cookies import CookieError, SimpleCookie
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestAborted

from common.asgi_http import HttpError, declared_length, header_map, respond_json

JSON_STEP_CHUNK = re.compile(r"^/api/episodes/[^/]+/steps/?$")


def body_limit(headers: dict[str, str], path: str = "") -> tuple[int, str]:
    """The largest body this request may have, and the setting that says so."""
    if headers.get("content-type", "").split(";", 1)[0].strip().lower() == "application/json":
        if JSON_STEP_CHUNK.match(path):
            return min(
                settings.INGEST_JSON_CHUNK_MAX_BYTES, settings.MAX_JSON_BODY_BYTES
            ), "INGEST_JSON_CHUNK_MAX_BYTES"
        return settings.MAX_JSON_BODY_BYTES, "MAX_JSON_BODY_BYTES"
    return settings.MAX_REQUEST_BODY_BYTES, "MAX_REQUEST_BODY_BYTES"


def anonymous(headers: dict[str, str]) -> bool:
    """Neither a token nor a session cookie: nothing Django could authenticate."""
    if headers.get("authorization"):
        return False
    try:
        cookies = SimpleCookie(headers.get("cookie", ""))
    except CookieError:
        return True
    return settings.SESSION_COOKIE_NAME not in cookies


def anonymous_refusal(size: str) -> dict:
    limit = settings.ANONYMOUS_BODY_MAX_BYTES
    return {
        "detail": f"authentication credentials were not provided; an anonymous body of {size} bytes is refused "
        f"unread (the limit is {limit} bytes, ANONYMOUS_BODY_MAX_BYTES)"
    }


class BodyLimit:
    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = header_map(scope)
        limit, what = body_limit(headers, scope.get("path", ""))
        unknown = anonymous(headers)
        try:
            declared_length(headers, limit, what)
        except HttpError as exc:
            await respond_json(send, exc.status, {"detail": exc.detail})
            return
        declared = headers.get("content-length", "")
        if unknown and declared.isdigit() and int(declared) > settings.ANONYMOUS_BODY_MAX_BYTES:
            await respond_json(send, 401, anonymous_refusal(declared))
            return
        received = 0

        async def bounded_receive() -> dict:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if unknown and received > settings.ANONYMOUS_BODY_MAX_BYTES:
                await respond_json(send, 401, anonymous_refusal(f"more than {settings.ANONYMOUS_BODY_MAX_BYTES}"))
                raise RequestAborted("anonymous body past ANONYMOUS_BODY_MAX_BYTES")
            if received > limit:
                await respond_json(send, 413, {"detail": f"body larger than {limit} bytes ({what})"})
                raise RequestAborted(f"body past {what}")  # Django's handler ends the request quietly
            return message

        await self.app(scope, bounded_receive, send)
