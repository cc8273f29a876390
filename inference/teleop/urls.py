"""URLs of live teleop (included by webapp/urls.py)."""

from django.urls import path

from . import views

urlpatterns = [
    path("teleop/", views.teleop_sessions, name="teleop-sessions"),
    path("teleop/<int:session_id>/", views.teleop_dashboard, name="teleop-dashboard"),
    path("api/teleop/sessions/", views.TeleopSessionList.as_view(), name="api-teleop-sessions"),
]
