"""Storage-relative folders to local paths for torch (which reads and writes real files).

Reads go through `webapp.common.filestore`: MEDIA_ROOT's own path with the local storage, this machine's
cache with an object store. Jobs write into `work_folder` and publish it when complete."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from webapp.common.filestore.services import stored_local


def local_path(name: str) -> Path:
    """The local file or folder with stored `name`'s content; a path that does not exist when there is none
    (or it is not completely published), as MEDIA_ROOT's own path would be."""
    try:
        return stored_local(name)
    except FileNotFoundError:
        return Path(settings.STORAGE_CACHE_DIR) / "missing" / name
