from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.files.storage import default_storage
from django.http import FileResponse, Http404, JsonResponse
from django.shortcuts import render

from labeling.selectors import project_list_with_counts


@login_required
def home(request):
    return render(request, "home.html", {"projects": project_list_with_counts()})


def healthz(request):
    return JsonResponse({"ok": True})


@login_required
def media(request, path: str):
    """Stored files (frames, exports) for logged-in people; an object store would serve signed URLs."""
    if ".." in path.split("/") or not default_storage.exists(path):
        raise Http404("No such file")
    return FileResponse(default_storage.open(path, "rb"))
