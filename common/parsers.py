"""Request parsers with size and depth limits: a body over its size limit gets a 413 naming the setting,
unread and unparsed; JSON nested deeper than JSON_MAX_DEPTH gets a 400, unparsed (common.json_limits)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined]  # (DRF 3.16+; not in the stubs)
from rest_framework.utils.json import strict_constant

from .json_limits import JSONTooDeep, loads_bounded


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "request too large"
    default_code = "too_large"


class BoundedJSONParser(JSONParser):
    """JSON bodies up to `MAX_JSON_BODY_BYTES` and `JSON_MAX_DEPTH` levels; a longer body is refused before it
    is read, a deeper one before it is parsed."""

    def parse(
        self, stream: IO[bytes] | None, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        limit = settings.MAX_JSON_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and str(declared).isdigit() and int(declared) > limit:
            raise RequestTooLarge(f"JSON body of {declared} bytes; the limit is {limit} bytes (MAX_JSON_BODY_BYTES)")
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge(f"JSON body larger than {limit} bytes (MAX_JSON_BODY_BYTES)")
        try:
            text = raw.decode(get_encoding(parser_context or {}))
        except (UnicodeDecodeError, LookupError) as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        return json_body(text)


def json_body(raw: bytes | str) -> Any:
    """A request body's JSON, as DRF's JSONParser reads it (no NaN or Infinity) within JSON_MAX_DEPTH;
    ParseError (400) saying what is wrong."""
    try:
        return loads_bounded(raw, max_depth=settings.JSON_MAX_DEPTH, what="JSON body", parse_constant=strict_constant)
    except ValueError as exc:  # JSONTooDeep, JSONDecodeError, UnicodeDecodeError
        detail = str(exc) if isinstance(exc, JSONTooDeep) else f"JSON parse error - {exc}"
        raise exceptions.ParseError(detail) from None
