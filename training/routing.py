"""WebSocket routes of the training app (collected by webapp/routing.py)."""

from django.urls import path

from .consumers import JobConsumer

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", JobConsumer.as_asgi()),
]
