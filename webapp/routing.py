"""WebSocket URL patterns, collected from each app's `routing.websocket_urlpatterns`."""

from __future__ import annotations

from importlib import import_module

APPS_WITH_WEBSOCKETS = ["training", "inference"]


def websocket_urlpatterns() -> list:
    patterns: list = []
    for app in APPS_WITH_WEBSOCKETS:
        try:
            module = import_module(f"{app}.routing")
        except ModuleNotFoundError as exc:
            if exc.name != f"{app}.routing":
                raise
            continue
        patterns.extend(module.websocket_urlpatterns)
    return patterns
