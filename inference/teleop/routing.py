"""WebSocket routes of live teleop (included by webapp/routing.py)."""

from django.urls import path

from .consumers import TeleopAgentConsumer, TeleopDashboardConsumer

websocket_urlpatterns = [
    path("ws/teleop/agent/", TeleopAgentConsumer.as_asgi()),
    path("ws/teleop/sessions/<int:session_id>/", TeleopDashboardConsumer.as_asgi()),
]
