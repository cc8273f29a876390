"""The runs page (`/projects/<id>/runs/`): several training jobs' curves on one chart, W&B-like: pick the runs,
the metric and an exponential smoothing; the curves themselves come from each job's metrics API."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from projects import access
from projects.models import Project
from training import permissions as training_perms
from training import selectors
from training.page_data import RunChoice, RunsPageData

RUNS_LISTED = 50  # the latest jobs offered
RUNS_PICKED_MAX = 10  # curves on one chart
RUNS_PICKED_DEFAULT = 3


def picked_runs(value: str, offered: list[int]) -> list[int]:
    """The runs named in `?jobs=1,2` that are offered (others and junk ignored), at most RUNS_PICKED_MAX; the
    latest RUNS_PICKED_DEFAULT when none is named."""
    named = [int(part) for part in value.split(",") if part.strip().isdigit()]
    chosen = [job for job in dict.fromkeys(named) if job in offered] if named else offered[:RUNS_PICKED_DEFAULT]
    return chosen[:RUNS_PICKED_MAX]


def smoothing_of(value: str) -> float:
    """`?smoothing=0.6`, in [0, 0.99]; 0 (none) when absent or not a number."""
    try:
        return min(0.99, max(0.0, float(value)))
    except ValueError:
        return 0.0


@login_required
def runs(request: HttpRequest, pk: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, training_perms.TRAINING_VIEW, project)
    jobs = list(selectors.jobs_for_project(project)[:RUNS_LISTED])
    choices = [
        RunChoice(
            id=job.pk,
            name=f"#{job.pk} {job.name}".strip(),
            status=job.status,
            metrics=reverse("api-job-metrics", args=[job.pk]),
        )
        for job in jobs
    ]
    data = RunsPageData(
        project=project.pk,
        runs=choices,
        picked=picked_runs(request.GET.get("jobs", ""), [job.pk for job in jobs]),
        smoothing=smoothing_of(request.GET.get("smoothing", "")),
    )
    return render(request, "training/runs.html", {"project": project, "page_data": data, "picked_max": RUNS_PICKED_MAX})
