"""Site-wide views: home page, health, metrics and stored files."""

from __future__ import annotations

import hmac
import ipaddress
import mimetypes
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.files.storage import default_storage
from django.http import Http404, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import render
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from common.stored_responses import stored_response
from inference import permissions as inference_perms
from labeling import permissions as labeling_perms
from labeling.labels.selectors import project_list_with_counts
from projects import access
from training import permissions as training_perms
from webapp.monitoring.health import health_report, health_summary
from webapp.monitoring.metrics_state import StateCollector


@login_required
def home(request):
    projects = project_list_with_counts().filter(pk__in=access.visible_projects(request.user).values("pk"))
    return render(request, "home.html", {"projects": projects})


def _monitoring_caller(request) -> bool:
    """Whether the caller may read names, errors and hosts: `Bearer <METRICS_TOKEN>` or a site admin."""
    token = settings.METRICS_TOKEN
    if token and hmac.compare_digest(request.headers.get("Authorization", ""), f"Bearer {token}"):
        return True
    return access.is_site_admin(request.user)


def healthz(request):
    """Database, Redis, inference workers and deployments; 200 when all are fine, else 503. Anyone gets each
    part's `ok`; the details (deployment names and errors, worker ids) need METRICS_TOKEN or a site admin."""
    report = health_report()
    status = 200 if report["ok"] else 503
    if _monitoring_caller(request):
        return JsonResponse(report, status=status)
    return JsonResponse(health_summary(report), status=status)


def metrics(request):
    """Prometheus metrics of this web process plus state read from the database and Redis. They name
    deployments and queues: `Bearer <METRICS_TOKEN>` or a site admin; with no METRICS_TOKEN set, also a
    scraper on this machine (loopback)."""
    if not _monitoring_caller(request) and (settings.METRICS_TOKEN or not _loopback(request)):
        return HttpResponse("metrics need `Authorization: Bearer <METRICS_TOKEN>`", status=401)
    state = CollectorRegistry(auto_describe=False)
    state.register(StateCollector())
    body = generate_latest(REGISTRY) + generate_latest(state)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def _loopback(request) -> bool:
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


SMALL_FILE_BYTES = 4 * 1024 * 1024


def media_owner(path: str) -> tuple[str, int] | None:
    """("project", id) or ("job", id) or ("deployment", id) owning a stored file, from its storage name.

    frames/<project>/..., snapshots/project_<project>/..., checkpoints/job_<job>/..., served/<deployment>/...
    Anything else (for example imported checkpoints) has no owner: site admins only.
    """
    parts = path.split("/")
    if len(parts) < 3:
        return None
    top, folder = parts[0], parts[1]
    if top == "frames" and folder.isdigit():
        return "project", int(folder)
    if top == "snapshots" and folder.startswith("project_") and folder[8:].isdigit():
        return "project", int(folder[8:])
    if top == "checkpoints" and folder.startswith("job_") and folder[4:].isdigit():
        return "job", int(folder[4:])
    if top == "served" and folder.isdigit():
        return "deployment", int(folder)
    return None


def _media_allowed(request, path: str) -> bool:
    if access.is_site_admin(request.user):
        return True
    owner = media_owner(path)
    if owner is None:
        return False
    kind, pk = owner
    if kind == "project":
        return access.can(request.user, labeling_perms.VIEW, pk)
    if kind == "job":
        from training.models import TrainingJob

        project_id = TrainingJob.objects.filter(pk=pk).values_list("project_id", flat=True).first()
        return project_id is not None and access.can(request.user, training_perms.TRAINING_VIEW, project_id)
    from inference.models import Deployment

    deployment = Deployment.objects.filter(pk=pk).first()
    return deployment is not None and access.can(request.user, inference_perms.DEPLOYMENT_VIEW, deployment)


@login_required
def media(request, path: str):
    """Stored files (frames, snapshots, checkpoints) for the members of the project they belong to.

    Others get a 404, as for a missing file. Stored names never change content (new data gets new names),
    so browsers may keep them for a day. With MEDIA_ACCEL_REDIRECT set, nginx sends the file (the answer
    only names it); otherwise the app answers it, whole or one byte range (Range: 206, or 416 past the end;
    on an object store only the range's bytes are read), small answers (frames) in one piece and large
    ones streamed.
    """
    if ".." in path.split("/") or not _media_allowed(request, path):
        raise Http404("No such file")
    content_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    response: HttpResponseBase
    if settings.MEDIA_ACCEL_REDIRECT:
        if not default_storage.exists(path):
            raise Http404("No such file")
        response = HttpResponse(content_type=content_type)
        response["X-Accel-Redirect"] = settings.MEDIA_ACCEL_REDIRECT.rstrip("/") + "/" + quote(path)
    else:
        response = stored_response(
            request, default_storage, path, content_type=content_type, small_bytes=SMALL_FILE_BYTES
        )
    if response.status_code in (200, 206):
        response["Cache-Control"] = "private, max-age=86400, immutable"
    return response
