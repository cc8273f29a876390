from django.urls import path

from . import api as ingest_api

urlpatterns = [
    path("api/episodes", ingest_api.EpisodeCreateView.as_view(), name="api-episode-create"),
    path("api/episodes/<uuid:uuid>", ingest_api.EpisodeDetailView.as_view(), name="api-episode-detail"),
    path("api/episodes/<uuid:uuid>/steps", ingest_api.StepChunkView.as_view(), name="api-episode-steps"),
    path("api/episodes/<uuid:uuid>/finish", ingest_api.EpisodeFinishView.as_view(), name="api-episode-finish"),
]
