"""Label API and labeling pages."""

from django.urls import path

from . import pages

urlpatterns = [
    path("projects/<int:pk>/", pages.project_detail, name="project-detail"),
]
