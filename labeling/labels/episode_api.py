"""Episode list API: a project's episodes with their label counts, filtered as on the project page, one
page at a time (a project may hold thousands of episodes)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.views import APIView

from labeling import permissions as labeling_perms
from projects import access
from projects.models import Project

from ..episode_browse import SEARCH_MAX_CHARS, SORTS, attach_thumbnails
from ..models import Episode
from . import selectors as label_selectors

PAGE_SIZE = 100
MAX_PAGE_SIZE = 500


class EpisodeFilterIn(serializers.Serializer):
    source = serializers.ChoiceField(choices=Episode.Source.choices, required=False)  # type: ignore[assignment]
    agent = serializers.CharField(max_length=200, required=False, help_text="Agent name.")
    state = serializers.ChoiceField(choices=label_selectors.LABEL_STATES, required=False)
    proposals = serializers.ChoiceField(choices=["yes", "no"], required=False, help_text="Open proposals exist.")
    success = serializers.ChoiceField(choices=["yes", "no", "unknown"], required=False)
    q = serializers.CharField(
        max_length=SEARCH_MAX_CHARS,
        required=False,
        help_text="Start of the episode id, or part of its env id or agent.",
    )
    sort = serializers.ChoiceField(choices=list(SORTS), required=False, help_text="Order; newest first by default.")


# component_name: the OpenAPI name the body had before the <Thing>In/<Thing>Out naming rule, kept for clients.
@extend_schema_serializer(component_name="EpisodeRow")
class EpisodeRowOut(serializers.Serializer):
    uuid = serializers.UUIDField()
    source = serializers.CharField()  # type: ignore[assignment]
    agent = serializers.CharField(source="agent.name", default=None, allow_null=True)
    env_id = serializers.CharField()
    success = serializers.BooleanField(allow_null=True)
    status = serializers.CharField()
    num_steps = serializers.IntegerField()
    human_frames = serializers.IntegerField()
    human_windows = serializers.IntegerField()
    open_frame_proposals = serializers.IntegerField()
    open_window_proposals = serializers.IntegerField()
    label_state = serializers.CharField()
    created_at = serializers.DateTimeField()
    label_url = serializers.SerializerMethodField()
    thumbnail = serializers.CharField(allow_null=True, help_text="The episode's last frame, first camera.")

    def get_label_url(self, episode) -> str:
        return reverse("episode-label", args=[episode.uuid])


@extend_schema_serializer(component_name="EpisodePage")
class EpisodePageOut(serializers.Serializer):
    """What the list answers: one page of rows (PageNumberPagination's envelope)."""

    count = serializers.IntegerField(help_text="Episodes matching the filters, all pages.")
    next = serializers.URLField(allow_null=True, help_text="The next page, or null on the last.")
    previous = serializers.URLField(allow_null=True, help_text="The previous page, or null on the first.")
    results = EpisodeRowOut(many=True)


class EpisodePagination(PageNumberPagination):
    page_size = PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE


class EpisodeListView(APIView):
    @extend_schema(
        parameters=[EpisodeFilterIn],
        responses=EpisodePageOut,
        summary="The project's episodes with label counts and thumbnails, searched, filtered, sorted and paginated",
    )
    def get(self, request, pk):
        project = get_object_or_404(Project, pk=pk)
        access.require(request.user, labeling_perms.VIEW, project)
        filters = EpisodeFilterIn(data=request.query_params)
        filters.is_valid(raise_exception=True)
        ids = label_selectors.episode_list_ids(project=project, **filters.validated_data)
        paginator = EpisodePagination()
        page = paginator.paginate_queryset(ids, request, view=self) or []
        rows = attach_thumbnails(
            project=project, episodes=label_selectors.episodes_by_ids(project=project, ids=list(page))
        )
        return paginator.get_paginated_response(EpisodeRowOut(rows, many=True).data)
