"""Reads of the ingest API."""

from __future__ import annotations

from ..models import Episode, Step


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
