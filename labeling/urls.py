"""Labeling URLs, one module per area so each can grow on its own."""

from django.urls import include, path

urlpatterns = [
    path("", include("labeling.ingest.urls")),
    path("", include("labeling.labels.urls")),
    path("", include("labeling.imports.urls")),
    path("", include("labeling.proposals.urls")),
]
