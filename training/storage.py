"""Storage-relative folders to local paths for torch (which reads and writes real files)."""

from __future__ import annotations

from pathlib import Path

from django.core.files.storage import default_storage


def local_path(name: str) -> Path:
    """The local file or folder behind a storage-relative name.

    FileSystemStorage maps names to MEDIA_ROOT. Object stores have no local path: run training and
    inference where the storage is mounted or synced to a local cache, and point MEDIA_ROOT there.
    """
    try:
        return Path(default_storage.path(name))
    except NotImplementedError:
        raise RuntimeError(
            "the storage backend has no local paths; training and inference need MEDIA_ROOT on a local or "
            "mounted folder (sync the object store to a local cache)"
        ) from None
