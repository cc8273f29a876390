"""Request parsers with size limits: a body over its limit gets a 413 naming the setting, unread and unparsed."""

from __future__ import annotations

import io

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "request too large"
    default_code = "too_large"


class BoundedJSONParser(JSONParser):
    """JSON bodies up to `MAX_JSON_BODY_BYTES`; a longer body is refused before it is read or parsed."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.MAX_JSON_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and str(declared).isdigit() and int(declared) > limit:
            raise RequestTooLarge(f"JSON body of {declared} bytes; the limit is {limit} bytes (MAX_JSON_BODY_BYTES)")
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge(f"JSON body larger than {limit} bytes (MAX_JSON_BODY_BYTES)")
        return super().parse(io.BytesIO(raw), media_type, parser_context)
