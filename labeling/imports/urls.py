"""The import page (the import_episodes command is its command-line twin) and the LeRobot export
(export_lerobot)."""

from django.urls import path

from . import views as import_views
from .lerobot import views as lerobot_views

urlpatterns = [
    path("projects/<int:pk>/import/", import_views.project_import, name="project-import"),
    path("projects/<int:pk>/import/<int:job>/", import_views.project_import_job, name="project-import-job"),
    path("projects/<int:pk>/export/lerobot/", lerobot_views.project_export_lerobot, name="project-export-lerobot"),
    path(
        "projects/<int:pk>/export/lerobot/<str:token>/",
        lerobot_views.project_export_lerobot_job,
        name="project-export-lerobot-job",
    ),
    path(
        "projects/<int:pk>/export/lerobot/<str:token>/download",
        lerobot_views.project_export_lerobot_download,
        name="project-export-lerobot-download",
    ),
]
