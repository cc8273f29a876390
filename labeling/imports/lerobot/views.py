"""/projects/<pk>/export/lerobot/: the project's episodes and labels as a zipped LeRobot dataset. GET builds it
while the request waits (scripts); POST starts a background export (the project page's button) and answers at
once with the URLs of its progress and of its download (labeling/imports/lerobot/export_jobs.py)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.text import slugify

from labeling import permissions as labeling_perms
from projects import access
from projects.models import Project

from .export import ExportError, lerobot_export_zip
from .export_jobs import export_job_file, export_job_start, export_job_state

FPS_CHOICES = range(1, 241)


@login_required
def project_export_lerobot(request, pk: int):
    """Built while the request waits (bounded by LEROBOT_EXPORT_MAX_FRAMES); `?fps=N` sets the frame rate
    (default 10). A project over the limit, or with nothing to export, answers 400 saying so."""
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, labeling_perms.VIEW, project)
    fps_text = (request.POST if request.method == "POST" else request.GET).get("fps", "10")
    if not fps_text.isdigit() or int(fps_text) not in FPS_CHOICES:
        return HttpResponse(f"fps must be a whole number from 1 to 240; got {fps_text!r}", status=400)
    if request.method == "POST":
        return _export_start(project, int(fps_text))
    try:
        handle = lerobot_export_zip(project=project, max_frames=settings.LEROBOT_EXPORT_MAX_FRAMES, fps=int(fps_text))
    except ExportError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain")
    name = f"{slugify(project.name) or 'project'}-lerobot.zip"
    return FileResponse(handle, as_attachment=True, filename=name, content_type="application/zip")


def _export_start(project: Project, fps: int) -> JsonResponse:
    """202 with the job's progress and download URLs; 400 with the reason for a project with nothing to export."""
    if not project.episodes.filter(status="finished").exists():
        return JsonResponse({"detail": f"project {project.name!r} has no finished episodes to export"}, status=400)
    token = export_job_start(project=project, fps=fps)
    return JsonResponse(
        {
            "status_url": reverse("project-export-lerobot-job", args=[project.pk, token]),
            "download_url": reverse("project-export-lerobot-download", args=[project.pk, token]),
            **_state_or_queued(token, project),
        },
        status=202,
    )


def _state_or_queued(token: str, project: Project) -> dict:
    return export_job_state(token=token, project=project) or {"status": "queued", "done": 0, "total": 0}


@login_required
def project_export_lerobot_job(request, pk: int, token: str):
    """A background export's state: status (queued, running, succeeded, failed), episodes done of total, error."""
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, labeling_perms.VIEW, project)
    state = export_job_state(token=token, project=project)
    if state is None:
        return JsonResponse({"detail": "no such export (exports are kept for an hour)"}, status=404)
    return JsonResponse(state)


@login_required
def project_export_lerobot_download(request, pk: int, token: str):
    """The finished background export's zip; 409 while it is being written (or when it failed), 404 for an
    unknown or expired one."""
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, labeling_perms.VIEW, project)
    state = export_job_state(token=token, project=project)
    if state is not None and state["status"] != "succeeded":
        return HttpResponse(f"this export is {state['status']}, not ready to download", status=409)
    handle = export_job_file(token=token, project=project)
    if handle is None:
        return HttpResponse("no such export (exports are kept for an hour)", status=404)
    name = f"{slugify(project.name) or 'project'}-lerobot.zip"
    return FileResponse(handle, as_attachment=True, filename=name, content_type="application/zip")
