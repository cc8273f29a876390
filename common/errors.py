"""API errors: every 4xx body has a human-readable `detail`; validation errors also keep their fields."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and "detail" not in data or isinstance(data, list):
        response.data = {"detail": _summarise(data), "errors": data}
    return response


def _summarise(errors: Any, prefix: str = "") -> str:
    if isinstance(errors, dict):
        for key, value in errors.items():
            return _summarise(value, f"{prefix}{key}: " if key != "non_field_errors" else prefix)
    if isinstance(errors, list) and errors:
        return _summarise(errors[0], prefix)
    return f"{prefix}{errors}"
