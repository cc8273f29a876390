"""Search, sort and thumbnails of a project's episode list (the project page and the episode list API).

Search matches the start of an episode's id, its env id or its agent's name; sorts are on stored columns
only (no label count), so a sorted page costs what the newest-first one does; a thumbnail is the episode's
last frame (where it ended: cube lifted or not) from the project's first camera, one query per page.
"""

from __future__ import annotations

import re

from django.core.files.storage import default_storage
from django.db.models import F, OrderBy, Q, QuerySet

from projects.models import Project

from .models import Episode, Frame

SEARCH_MAX_CHARS = 100
# name -> (label, ORDER BY); the first is the default
SORTS: dict[str, tuple[str, tuple[str | OrderBy, ...]]] = {
    "newest": ("newest first", ("-created_at", "-pk")),
    "oldest": ("oldest first", ("created_at", "pk")),
    "longest": ("most steps", ("-num_steps", "-created_at", "-pk")),
    "shortest": ("fewest steps", ("num_steps", "-created_at", "-pk")),
    "success": ("successes first", (F("success").desc(nulls_last=True), "-created_at", "-pk")),
    "fail": ("failures first", (F("success").asc(nulls_last=True), "-created_at", "-pk")),
}
_HEX = re.compile(r"[0-9a-f-]+")


def episode_search(episodes: QuerySet[Episode], q: str) -> QuerySet[Episode]:
    """Episodes whose id starts with `q` (dashes optional), or whose env id or agent name contains it."""
    q = q.strip()[:SEARCH_MAX_CHARS]
    if not q:
        return episodes
    match = Q(env_id__icontains=q) | Q(agent__name__icontains=q)
    if _HEX.fullmatch(q.lower()):
        # a UUID column compares as text through its canonical form; the prefix is the id's start
        match |= Q(uuid__startswith=q.lower())
    return episodes.filter(match)


def episode_order(episodes: QuerySet[Episode], sort: str) -> QuerySet[Episode]:
    return episodes.order_by(*SORTS.get(sort or "newest", SORTS["newest"])[1])


def episode_thumbnails(*, project: Project, ids: list[int]) -> dict[int, str]:
    """Episode id -> URL of its last frame from the project's first camera (none for an episode without it)."""
    cameras = list(project.camera_views or [])
    if not ids or not cameras:
        return {}
    rows = Frame.objects.filter(
        step__episode_id__in=ids, camera=cameras[0], step__index=F("step__episode__num_steps") - 1
    ).values_list("step__episode_id", "image")
    return {episode_id: default_storage.url(name) for episode_id, name in rows}


def attach_thumbnails(*, project: Project, episodes: list[Episode]) -> list[Episode]:
    """Sets `thumbnail` (a URL or None) on each of one page's episodes."""
    urls = episode_thumbnails(project=project, ids=[e.pk for e in episodes])
    for e in episodes:
        e.thumbnail = urls.get(e.pk)  # type: ignore[attr-defined]
    return episodes
