"""Reads of what ingest stores: the steps an uploader already sent, the size of a camera's stored frames."""

from __future__ import annotations

from projects.models import Project

from ..models import Episode, Frame, Step


def episode_stored_ranges(*, episode: Episode) -> list[tuple[int, int]]:
    """The step indices stored for `episode`, as sorted inclusive ranges `(first, last)`: what an uploader
    that lost its connection (or its process) asks before it goes on, so it sends only what is missing."""
    ranges: list[tuple[int, int]] = []
    indices = Step.objects.filter(episode_id=episode.pk).order_by("index").values_list("index", flat=True)
    for index in indices.iterator(chunk_size=10_000):
        if ranges and index == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], index)
        else:
            ranges.append((index, index))
    return ranges


def stored_frame_width(*, project: Project, camera: str | None = None) -> int | None:
    """The width of a camera's frames stored in the project (its first camera by default); None: none yet.
    A project keeps one size per camera (the demo commands add episodes at the stored size)."""
    camera = camera or (project.camera_views or ["main"])[0]
    return Frame.objects.filter(step__episode__project=project, camera=camera).values_list("width", flat=True).first()
