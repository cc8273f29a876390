"""What a call to the service can raise: RewardServiceError subclasses carrying the HTTP status and the
server's message."""

from __future__ import annotations

import json


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


class ConnectionFailed(RewardServiceError):
    """The server could not be reached, even after retries."""


def error_for(status: int, content: bytes, reason: str | None) -> RewardServiceError:
    """The error for an HTTP error answer: its JSON `detail` (or `error.message`), else its text."""
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
    if status == 503:
        return ServiceUnavailable(detail, status)
    if 400 <= status < 500:
        return BadRequestError(detail, status)
    return RewardServiceError(detail, status)
