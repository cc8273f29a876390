"""Server-rendered page shells for labeling; the interactive parts are in frontend/src/pages."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from . import label_selectors
from .models import Agent, Episode, Project

FILTERS = ("source", "agent", "state", "proposals", "success")


@login_required
def project_detail(request, pk: int):
    """The project page: progress toward targets and the filtered episode list."""
    project = get_object_or_404(Project, pk=pk)
    filters = {name: request.GET.get(name, "") for name in FILTERS}
    episodes = label_selectors.episode_list(project=project, **filters)
    page = Paginator(episodes, 100).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "labeling/project_detail.html",
        {
            "project": project,
            "page": page,
            "episodes": page.object_list,
            "filters": filters,
            "filter_query": query.urlencode(),
            "progress": label_selectors.project_progress(project=project),
            "open_proposals": label_selectors.project_open_proposals(project=project),
            "total_episodes": project.episodes.count(),
            "sources": Episode.Source.choices,
            "agents": Agent.objects.filter(episodes__project=project).distinct().values_list("name", flat=True),
            "page_data": {"project": project.pk, "api": f"/api/projects/{project.pk}"},
        },
    )


@login_required
def episode_label(request, uuid):
    """The labeling page. The episode's data is embedded so the first frame can be drawn at once."""
    episode = get_object_or_404(Episode.objects.select_related("project"), uuid=uuid)
    newer, older = label_selectors.episode_neighbours(episode=episode)
    data = label_selectors.episode_labeling_data(episode=episode)
    data["links"] = {
        "project": reverse("project-detail", args=[episode.project_id]),
        "newer": reverse("episode-label", args=[newer.uuid]) if newer else None,
        "older": reverse("episode-label", args=[older.uuid]) if older else None,
    }
    return render(
        request, "labeling/episode_label.html", {"episode": episode, "project": episode.project, "data": data}
    )
