"""What a call to the service can raise: RewardServiceError subclasses carrying the HTTP status and the
server's message."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime


class RewardServiceError(Exception):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message if status is None else f"HTTP {status}: {message}")
        self.status = status
        self.detail = message


class AuthenticationError(RewardServiceError):
    """401/403: missing, unknown or revoked token."""


class BadRequestError(RewardServiceError):
    """400/413/415/429: the request itself is wrong (dtype, shape, flags...)."""


class NotFoundError(RewardServiceError):
    """404: no deployment with that name."""


class ServiceUnavailable(RewardServiceError):
    """503: the deployment is unhealthy or no inference worker answered."""


class ServiceBusy(ServiceUnavailable):
    """503 with `Retry-After`: the service is overloaded (its queue is full, or its workers did not answer in
    time) and said when to try again. RewardClient retries these; this is raised when it gave up."""

    def __init__(self, message: str, status: int | None = 503, retry_after_s: float = 0.0):
        super().__init__(message, status)
        self.retry_after_s = retry_after_s


class ConnectionFailed(RewardServiceError):
    """The server could not be reached, even after retries."""


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """The answer's `Retry-After` in seconds (a number, or an HTTP date from now; 0 when unreadable), None
    without one."""
    value = (headers or {}).get("Retry-After")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return 0.0


def is_busy(status: int, headers: Mapping[str, str] | None) -> bool:
    """A 503 that says the service is busy: it carries `Retry-After` (RFC 9110 15.6.4). A 503 without one
    (unhealthy deployment, no worker running, a model that fails to load) is not."""
    return status == 503 and retry_after_s(headers) is not None


def error_for(
    status: int, content: bytes, reason: str | None, headers: Mapping[str, str] | None = None
) -> RewardServiceError:
    """The error for an HTTP error answer: its JSON `detail` (or `error.message`), else its text; a busy 503
    (with `Retry-After`) is a ServiceBusy."""
    try:
        body = json.loads(content)
        detail = body.get("detail") or (body.get("error") or {}).get("message") or body
        detail = str(detail)
    except (ValueError, AttributeError):
        detail = content.decode("utf-8", "replace")[:500] or reason or ""
    if status in (401, 403):
        return AuthenticationError(detail, status)
    if status == 404:
        return NotFoundError(detail, status)
    if is_busy(status, headers):
        return ServiceBusy(detail, status, retry_after_s(headers) or 0.0)
    if status == 503:
        return ServiceUnavailable(detail, status)
    if 400 <= status < 500:
        return BadRequestError(detail, status)
    return RewardServiceError(detail, status)
