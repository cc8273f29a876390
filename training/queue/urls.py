"""URLs of the labeling queue ranked by value (included by training/urls.py)."""

from django.urls import path

from . import views as queue_views

urlpatterns = [
    path("projects/<int:pk>/label-next", queue_views.label_next, name="label-next"),
    path("projects/<int:pk>/label-queue", queue_views.label_queue, name="label-queue"),
    path("projects/<int:pk>/label-queue/refresh", queue_views.label_queue_refresh, name="label-queue-refresh"),
]
