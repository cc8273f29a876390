"""WebSocket URL patterns: each app's `routing.websocket_urlpatterns`, listed explicitly."""

from __future__ import annotations

from django.urls import URLPattern


def websocket_urlpatterns() -> list[URLPattern]:
    """Imported when called: the ASGI module builds its router only after Django is set up."""
    from inference import routing as inference_routing
    from training import routing as training_routing

    return [*training_routing.websocket_urlpatterns, *inference_routing.websocket_urlpatterns]
