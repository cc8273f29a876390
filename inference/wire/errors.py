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


def unavailable(exc: Exception) -> exceptions.APIException:
    """The 503 for a DeploymentUnavailable: a busy one (DeploymentBusy, `retry_after_s`) carries `Retry-After`
    (DRF's handler writes it from `wait`), which tells a client the request is worth retrying. A request the
    workers refused for what it holds (serving.RequestRefused) is the client's error: a 400."""
    from inference.serving import RequestRefused

    if isinstance(exc, RequestRefused):
        return BadRequest(str(exc))
    error = ServiceUnavailable(str(exc))
    retry_after = getattr(exc, "retry_after_s", 0)
    if retry_after:
        error.wait = retry_after  # type: ignore[attr-defined]
    return error
