"""Pages and API of live teleop: the session list and a session's live dashboard."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.urls import NoReverseMatch, reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import ListAPIView

from inference.models import Deployment
from labeling import permissions as labeling_perms
from projects import access
from projects.models import Agent

from .models import TeleopSession

_PLACEHOLDER = "00000000-0000-0000-0000-000000000000"


def label_url_template() -> str:
    """The labeling page's URL with `{uuid}` in place of the episode (the labeler's route, if installed)."""
    try:
        return reverse("episode-label", kwargs={"uuid": _PLACEHOLDER}).replace(_PLACEHOLDER, "{uuid}")
    except NoReverseMatch:
        return "/episodes/{uuid}/label/"


def _sessions(actor):
    """The teleop sessions a caller may see: its projects' (people), its own in its projects (agents)."""
    sessions = TeleopSession.objects.select_related("agent", "project").prefetch_related("episodes")
    if access.is_agent(actor):
        sessions = sessions.filter(agent=actor)
    return sessions.filter(access.visible_project_filter(actor))


@login_required
def teleop_sessions(request):
    sessions = list(_sessions(request.user)[:100])
    template = label_url_template()
    for session in sessions:
        session.episode_links = [(e, template.replace("{uuid}", str(e.uuid))) for e in session.episodes.all()]
    return render(request, "teleop/sessions.html", {"sessions": sessions})


@login_required
def teleop_dashboard(request, session_id: int):
    session = get_object_or_404(_sessions(request.user), pk=session_id)
    deployment = Deployment.objects.filter(name=session.deployment_name).first() if session.deployment_name else None
    data = {
        "session": session.pk,
        "wsPath": f"/ws/teleop/sessions/{session.pk}/",
        "cameras": session.cameras or session.project.camera_views,
        "threshold": deployment.threshold if deployment else 0.5,
        "deployment": session.deployment_name,
        "labelUrl": label_url_template(),
        "hz": session.hz,
    }
    return render(request, "teleop/dashboard.html", {"session": session, "page_data": data})


class TeleopSessionOut(serializers.ModelSerializer):
    agent = serializers.CharField(source="agent.name")
    project = serializers.CharField(source="project.name")
    episodes = serializers.SerializerMethodField()

    class Meta:
        model = TeleopSession
        fields = [
            "id",
            "agent",
            "project",
            "deployment_name",
            "robot",
            "env_id",
            "policy",
            "hz",
            "cameras",
            "is_live",
            "started_at",
            "ended_at",
            "step_count",
            "inferred_count",
            "dropped_frames",
            "label_count",
            "stats",
            "episodes",
        ]

    def get_episodes(self, obj) -> list[str]:
        return [str(e.uuid) for e in obj.episodes.all()]


@extend_schema(summary="Live and past teleop sessions, newest first")
class TeleopSessionList(ListAPIView):
    serializer_class = TeleopSessionOut

    def get_queryset(self):
        if isinstance(self.request.user, Agent):
            access.require_scope(self.request.user, labeling_perms.TELEOP)
        queryset = _sessions(self.request.user)
        live = self.request.query_params.get("live")
        if live in ("1", "true"):
            queryset = queryset.filter(is_live=True)
        return queryset
