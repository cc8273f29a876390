"""The errors every reward endpoint answers with (REST rewards, VLM rewards, chat completions): one set, so a
client reads the same status and code for the same fault on each."""

from __future__ import annotations

from rest_framework import exceptions, status


class BadRequest(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "bad request"
    default_code = "bad_request"


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "inference is unavailable"
    default_code = "unavailable"
