"""GET /projects/<pk>/export/lerobot/: the project's episodes and labels as a zipped LeRobot dataset."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils.text import slugify

from . import access
from .lerobot_export import ExportError, lerobot_export_zip
from .models import Project

FPS_CHOICES = range(1, 241)


@login_required
def project_export_lerobot(request, pk: int):
    """Built while the request waits (bounded by LEROBOT_EXPORT_MAX_FRAMES); `?fps=N` sets the frame rate
    (default 10). A project over the limit, or with nothing to export, answers 400 saying so."""
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, access.VIEW, project)
    fps_text = request.GET.get("fps", "10")
    if not fps_text.isdigit() or int(fps_text) not in FPS_CHOICES:
        return HttpResponse(f"fps must be a whole number from 1 to 240; got {fps_text!r}", status=400)
    try:
        handle = lerobot_export_zip(project=project, max_frames=settings.LEROBOT_EXPORT_MAX_FRAMES, fps=int(fps_text))
    except ExportError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain")
    name = f"{slugify(project.name) or 'project'}-lerobot.zip"
    return FileResponse(handle, as_attachment=True, filename=name, content_type="application/zip")
