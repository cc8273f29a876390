"""Reads for the labeling app, among them the effective labels: where a step (or a window span) has
several labels, a human label counts over a proposal, a proposal over a model label, and a rejected
proposal never counts. Snapshots, the labeling queue and the retrain loop read labels through these."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from django.db.models import Model, QuerySet

from .models import Agent, Episode, Frame, FrameLabel, LabelSource, Project, ProposalStatus, WindowLabel

#: Which label counts when several are on one step or window span, first wins.
SOURCE_PRIORITY: tuple[str, ...] = (LabelSource.HUMAN, LabelSource.PROPOSAL, LabelSource.MODEL)

FRAME_LABEL_FIELDS = ("step_id", "value", "source", "episode_id", "author__username", "agent__name", "updated_at")
WINDOW_LABEL_FIELDS = ("pk", "episode_id", "start", "end", "value", "source")


def stored_frame_width(*, project: Project, camera: str | None = None) -> int | None:
    """The width of a camera's frames stored in the project (its first camera by default); None: none yet.
    A project keeps one size per camera (the demo commands add episodes at the stored size)."""
    camera = camera or (project.camera_views or ["main"])[0]
    return Frame.objects.filter(step__episode__project=project, camera=camera).values_list("width", flat=True).first()


def episode_by_uuid(uuid) -> Episode | None:
    return Episode.objects.select_related("project").filter(uuid=uuid).first()


def best_by_source(rows: Iterable[dict[str, Any]], key: str | tuple[str, ...]) -> dict[Hashable, dict[str, Any]]:
    """One row per `key` (a field, or fields making a tuple): the one whose source comes first in
    SOURCE_PRIORITY. Rows of a source not listed there are left out."""
    rank = {source: n for n, source in enumerate(SOURCE_PRIORITY)}
    best: dict[Hashable, dict[str, Any]] = {}
    for row in rows:
        if row["source"] not in rank:
            continue
        k = tuple(row[f] for f in key) if isinstance(key, tuple) else row[key]
        current = best.get(k)
        if current is None or rank[row["source"]] < rank[current["source"]]:
            best[k] = row
    return best


def _counting_frame_labels(*, project: Project, sources: Iterable[str]) -> QuerySet[FrameLabel]:
    """The project's frame labels from `sources` that may count (rejected never does)."""
    return FrameLabel.objects.filter(project=project, source__in=list(sources)).exclude(status=ProposalStatus.REJECTED)


def effective_frame_labels(*, project: Project, sources: Iterable[str]) -> dict[int, dict[str, Any]]:
    """Step id -> the frame label that counts among `sources` (fields FRAME_LABEL_FIELDS); rejected never counts."""
    rows = _counting_frame_labels(project=project, sources=sources).values(*FRAME_LABEL_FIELDS)
    return best_by_source(rows, "step_id")  # type: ignore[return-value]


def effective_frame_label_steps(*, project: Project, sources: Iterable[str]) -> QuerySet[FrameLabel, Any]:
    """The steps with a label that counts among `sources`, as a `step_id` values query (a subquery for
    `__in`: a million-frame project would otherwise send 100,000s of ids)."""
    return _counting_frame_labels(project=project, sources=sources).values("step_id")


def effective_window_labels(*, project: Project, sources: Iterable[str]) -> dict[tuple[int, int, int], dict[str, Any]]:
    """(episode id, start, end) -> the window label that counts among `sources` (fields WINDOW_LABEL_FIELDS);
    rejected and empty-valued labels never count."""
    rows = (
        WindowLabel.objects.filter(project=project, source__in=list(sources))
        .exclude(status=ProposalStatus.REJECTED)
        .exclude(value="")
        .values(*WINDOW_LABEL_FIELDS)
    )
    return best_by_source(rows, ("episode_id", "start", "end"))  # type: ignore[return-value]


def human_labeled_steps(*, project: Project) -> QuerySet[FrameLabel, Any]:
    """The ids (as a `step_id` values query, for `__in`) of the project's steps a person labeled."""
    return FrameLabel.objects.filter(project=project, source=LabelSource.HUMAN).values("step_id")


def human_frame_label_count(*, project: Project) -> int:
    return FrameLabel.objects.filter(project=project, source=LabelSource.HUMAN).count()


def agent_deployment_model() -> type[Model]:
    """The deployment model an agent's `deployments` point to, found through the relation (so labeling
    names no serving module)."""
    return Agent._meta.get_field("deployments").related_model


def deployments_by_name(names: Iterable[str]) -> tuple[list[Model], list[str]]:
    """The deployments an agent may be granted, by name, and the names that match none."""
    wanted = list(dict.fromkeys(names))
    found = agent_deployment_model()._default_manager.in_bulk(wanted, field_name="name")
    return [found[n] for n in wanted if n in found], [n for n in wanted if n not in found]
