"""Reads for the labeling app."""

from __future__ import annotations

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from .models import Episode, Frame, FrameLabel, Project, WindowLabel


def _count(model, **filters) -> Coalesce:
    rows = model.objects.filter(project=OuterRef("pk"), **filters).order_by().values("project")
    return Coalesce(Subquery(rows.annotate(n=Count("pk")).values("n")[:1]), 0)


def project_list_with_counts() -> QuerySet[Project]:
    frames = Frame.objects.filter(step__episode__project=OuterRef("pk")).order_by().values("step__episode__project")
    return Project.objects.annotate(
        episode_count=_count(Episode),
        frame_count=Coalesce(Subquery(frames.annotate(n=Count("pk")).values("n")[:1]), 0),
        frame_label_count=_count(FrameLabel, source="human"),
        window_label_count=_count(WindowLabel, source="human"),
    ).order_by("name")


def episode_by_uuid(uuid) -> Episode | None:
    return Episode.objects.select_related("project").filter(uuid=uuid).first()
