"""Stored names to local paths and back, for the code that needs real files (torch, zip, safetensors).

With the local storage (FileSystemStorage) a name's path is MEDIA_ROOT's own: nothing is copied and
publishing does nothing. With any other storage, reads go through this machine's cache
(STORAGE_CACHE_DIR, bounded by STORAGE_CACHE_MAX_MB) and writes go to a work folder under it, published
when complete."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.core.files.storage import FileSystemStorage, default_storage

from . import store
from .cache import FileCache
from .publish import folder_manifest, folder_publish, manifest_name, stored_fetch

MIB = 1024 * 1024


def storage_is_local() -> bool:
    return isinstance(default_storage, FileSystemStorage)


def file_cache() -> FileCache:
    return FileCache(Path(settings.STORAGE_CACHE_DIR), settings.STORAGE_CACHE_MAX_MB * MIB)


def _load(name: str, target: Path) -> None:
    stored_fetch(default_storage, name, target)


def stored_local(name: str) -> Path:
    """The local file or folder with stored `name`'s content (fetched into the cache when not local)."""
    if storage_is_local():
        return Path(default_storage.path(name))
    return file_cache().fetch(name, _load)


@contextlib.contextmanager
def stored_held(name: str) -> Iterator[Path]:
    """`stored_local`, kept from the cache's eviction for the block (a training run's snapshot)."""
    if storage_is_local():
        yield Path(default_storage.path(name))
        return
    with file_cache().held(name, _load) as path:
        yield path


def work_folder(name: str) -> Path:
    """The local folder a job writes stored folder `name` into (`folder_published` makes it visible)."""
    if storage_is_local():
        return Path(default_storage.path(name))
    return Path(settings.STORAGE_CACHE_DIR) / "work" / name


def work_folder_resume(name: str, *, retried: bool = True) -> Path:
    """`work_folder`, seeded from the last published copy when this machine has none (a job retried on
    another machine resumes from what the first one published). A job's first run (`retried` false) asks the
    store nothing: no copy of it can be published yet (a run publishes at its end; a retry from scratch
    deletes the folder), so a warm start on an object store makes no request at all."""
    folder = work_folder(name)
    if storage_is_local() or not retried or folder.exists() or folder_manifest(default_storage, name) is None:
        return folder
    stored_fetch(default_storage, name, folder)
    return folder


def folder_published(name: str) -> None:
    """Make work folder `name` visible in storage, complete (nothing to do when storage is local)."""
    if not storage_is_local():
        folder_publish(default_storage, work_folder(name), name)


def work_folder_drop(name: str) -> None:
    if not storage_is_local():
        shutil.rmtree(work_folder(name), ignore_errors=True)


def stored_folder_bytes(name: str) -> int:
    """Bytes of stored folder `name` (0 when it is none)."""
    if storage_is_local():
        folder = Path(default_storage.path(name))
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0
    manifest = folder_manifest(default_storage, name)
    return int(manifest["bytes"]) if manifest else 0


def stored_folder_delete(name: str) -> None:
    """Remove stored folder `name` and everything below it (its manifest first: it stops being complete)."""
    if storage_is_local():
        shutil.rmtree(default_storage.path(name), ignore_errors=True)
        return
    work_folder_drop(name)
    file_cache().drop(name)
    store.delete_prefix(default_storage, name.rstrip("/") + "/", first=manifest_name(name))


def stored_republish(name: str) -> None:
    """Publish again this machine's copy of stored folder `name` (files written beside a checkpoint)."""
    if not storage_is_local():
        folder_publish(default_storage, stored_local(name), name)
