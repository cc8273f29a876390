"""Site-wide views: home page, health, metrics and stored files."""

from __future__ import annotations

import hmac
import mimetypes

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.files.storage import default_storage
from django.http import FileResponse, Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from labeling.selectors import project_list_with_counts

from .health import health_report
from .metrics_state import StateCollector


@login_required
def home(request):
    return render(request, "home.html", {"projects": project_list_with_counts()})


def healthz(request):
    """Database, Redis, inference workers and each deployment; 200 when all are fine, else 503."""
    report = health_report()
    return JsonResponse(report, status=200 if report["ok"] else 503)


def metrics(request):
    """Prometheus metrics of this web process plus state read from the database and Redis."""
    token = settings.METRICS_TOKEN
    if token and not hmac.compare_digest(request.headers.get("Authorization", ""), f"Bearer {token}"):
        return HttpResponse("metrics need `Authorization: Bearer <METRICS_TOKEN>`", status=401)
    state = CollectorRegistry(auto_describe=False)
    state.register(StateCollector())
    body = generate_latest(REGISTRY) + generate_latest(state)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


SMALL_FILE_BYTES = 4 * 1024 * 1024


@login_required
def media(request, path: str):
    """Stored files (frames, exports) for logged-in people; an object store would serve signed URLs.

    Stored names never change content (new data gets new names), so browsers may keep them for a day.
    Small files (frames) are answered in one piece; large ones are streamed.
    """
    if ".." in path.split("/") or not default_storage.exists(path):
        raise Http404("No such file")
    content_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    if default_storage.size(path) <= SMALL_FILE_BYTES:
        with default_storage.open(path, "rb") as handle:
            response = HttpResponse(handle.read(), content_type=content_type)
    else:
        response = FileResponse(default_storage.open(path, "rb"), content_type=content_type)
    response["Cache-Control"] = "private, max-age=86400, immutable"
    return response
