"""URLs of a VLM model's RLinf export (included by training/urls.py)."""

from django.urls import path

from . import api, views

urlpatterns = [
    path("models/<int:model_id>/rlinf-export", views.rlinf_export, name="vlm-rlinf-export"),
    path("api/models/<int:model_id>/rlinf-export", api.RlinfExportView.as_view(), name="api-vlm-rlinf-export"),
]
