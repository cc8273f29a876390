"""URLs of live teleop (included by inference/urls.py)."""

from django.urls import path

from . import teleop_views

urlpatterns = [
    path("teleop/", teleop_views.teleop_sessions, name="teleop-sessions"),
    path("teleop/<int:session_id>/", teleop_views.teleop_dashboard, name="teleop-dashboard"),
    path("api/teleop/sessions/", teleop_views.TeleopSessionList.as_view(), name="api-teleop-sessions"),
]
