"""WebSocket routes of the inference app (collected by webapp/routing.py): live teleop's."""

from .teleop import routing as teleop_routing

websocket_urlpatterns = [*teleop_routing.websocket_urlpatterns]
