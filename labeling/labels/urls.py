"""Label API and labeling pages (the proposal endpoints are routed by proposals/urls.py)."""

from django.urls import path

from .. import pages
from . import api as label_api
from . import episode_api

urlpatterns = [
    path("projects/new/", pages.project_new, name="project-new"),
    path("projects/<int:pk>/", pages.project_detail, name="project-detail"),
    path("projects/<int:pk>/labeling-settings/", pages.project_settings, name="project-labeling-settings"),
    path("projects/<int:pk>/members/", pages.project_members, name="project-members"),
    path("episodes/<uuid:uuid>/label/", pages.episode_label, name="episode-label"),
    path("api/episodes/<uuid:uuid>/labeling", label_api.EpisodeLabelingView.as_view(), name="api-episode-labeling"),
    path("api/episodes/<uuid:uuid>/frames", label_api.FrameBundleView.as_view(), name="api-episode-frames"),
    path("api/episodes/<uuid:uuid>/frame-labels", label_api.FrameLabelsView.as_view(), name="api-frame-labels"),
    path("api/episodes/<uuid:uuid>/window-labels", label_api.WindowLabelsView.as_view(), name="api-window-labels"),
    path("api/episodes/<uuid:uuid>/history", label_api.EpisodeHistoryView.as_view(), name="api-episode-history"),
    path("api/projects/<int:pk>/episodes", episode_api.EpisodeListView.as_view(), name="api-project-episodes"),
    path("api/projects/<int:pk>/progress", label_api.ProjectProgressView.as_view(), name="api-project-progress"),
]
