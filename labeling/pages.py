"""Server-rendered page shells for labeling; the interactive parts are in frontend/src/pages."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from .models import Project


@login_required
def project_detail(request, pk: int):
    project = get_object_or_404(Project, pk=pk)
    return render(
        request, "labeling/project_detail.html", {"project": project, "episodes": project.episodes.all()[:200]}
    )
