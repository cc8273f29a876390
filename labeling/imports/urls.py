"""The import page (the import_episodes command is its command-line twin)."""

from django.urls import path

from . import views as import_views

urlpatterns = [
    path("projects/<int:pk>/import/", import_views.project_import, name="project-import"),
    path("projects/<int:pk>/import/<int:job>/", import_views.project_import_job, name="project-import-job"),
]
