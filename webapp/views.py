from __future__ import annotations

import mimetypes

from django.contrib.auth.decorators import login_required
from django.core.files.storage import default_storage
from django.http import FileResponse, Http404, HttpResponse, JsonResponse
from django.shortcuts import render

from labeling.selectors import project_list_with_counts


@login_required
def home(request):
    return render(request, "home.html", {"projects": project_list_with_counts()})


def healthz(request):
    return JsonResponse({"ok": True})


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
