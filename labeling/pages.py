"""Server-rendered page shells for labeling; the interactive parts are in frontend/src/pages."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, render
from django.urls import NoReverseMatch, reverse

from . import label_selectors
from .models import Agent, Episode, Project

FILTERS = ("source", "agent", "state", "proposals", "success")

# Extension points for other apps (append from AppConfig.ready()):
# PROJECT_LINKS: (label, URL name taking the project pk) shown as buttons at the top of the project page;
# PROJECT_SECTIONS: template names rendered as panels on the project page, with `project` in their context.
PROJECT_LINKS: list[tuple[str, str]] = [("Import files", "project-import"), ("Training", "training-project")]
PROJECT_SECTIONS: list[str] = []


def _project_links(project: Project) -> list[tuple[str, str]]:
    links = []
    for label, name in PROJECT_LINKS:
        try:
            links.append((label, reverse(name, args=[project.pk])))
        except NoReverseMatch:  # the app that provides it is not installed
            continue
    return links


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
            "project_links": _project_links(project),
            "project_sections": PROJECT_SECTIONS,
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
    # The frames of the starting step are preloaded by the browser while the script loads.
    start = request.GET.get("step", "")
    indices = data["steps"]["index"]
    position = indices.index(int(start)) if start.isdigit() and int(start) in indices else 0
    preload = [urls[position] for urls in data["frames"].values() if urls and urls[position]]
    context = {"episode": episode, "project": episode.project, "data": data, "preload": preload}
    return render(request, "labeling/episode_label.html", context)
