"""Writing and removing frame files through Django's storage, straight to disk when it is the local one.

FileSystemStorage.save looks for a free name, writes through a temporary file object and copies in
chunks: several system calls and a few hundred microseconds per frame, more than the write itself.
Frame names are unique by construction (project, episode UUID, step index, camera; the step row is
locked while they are written), so for the local storage each frame is one open-write-close at its
final name, with the settings' file and folder permissions. Any other storage (S3 and the like) goes
through its own `save`, except an S3 storage: a chunk's frames are PUT concurrently (`filestore.store.objects_put`).

The files of a call are written one after another on the caller's thread. Each of these system calls
lets go of the GIL; with other threads writing at the same time, every one of them becomes a hand-over
(a futex wake-up and sleep, several microseconds of kernel time each): on the ingest bench, frame files
written by four threads per chunk cost the web process 1.1 to 1.7 times the kernel time of the same files
written in line, and strace counted 48 futex calls per file.
"""

from __future__ import annotations

import contextlib
import os

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def writes_in_place(storage: Storage) -> bool:
    """Whether `frames_write` stores each file under exactly the name given (the local file system)."""
    return isinstance(storage, FileSystemStorage)


def frames_write(storage: Storage, files: list[tuple[str, bytes]]) -> list[str]:
    """Store each (name, data); the stored names, in order. On failure, what was written is removed."""
    if not writes_in_place(storage):
        return _through_storage(storage, files)
    written: list[str] = []
    folders: dict[str, str] = {}  # folder name -> its path, made once per call
    file_mode = settings.FILE_UPLOAD_PERMISSIONS
    folder_mode = settings.FILE_UPLOAD_DIRECTORY_PERMISSIONS
    try:
        for name, data in files:
            folder_name, _, file_name = name.rpartition("/")
            folder = folders.get(folder_name) if file_name not in ("", ".", "..") else None
            if folder is None:  # the storage's own path check (inside MEDIA_ROOT) for each new folder
                path = storage.path(name)
                folder = folders[folder_name] = os.path.dirname(path)
                if folder_mode is None:
                    os.makedirs(folder, exist_ok=True)
                else:
                    _makedirs(folder, folder_mode)
            else:
                path = os.path.join(folder, file_name)
            handle = os.open(path, _FLAGS, 0o666 if file_mode is None else file_mode)
            written.append(name)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(handle, view) :]
                if file_mode is not None:
                    os.fchmod(handle, file_mode)
            finally:
                os.close(handle)
    except BaseException:
        frames_delete(storage, written)
        raise
    return written


def frames_delete(storage: Storage, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(OSError):
            storage.delete(name)


def _through_storage(storage: Storage, files: list[tuple[str, bytes]]) -> list[str]:
    from common.filestore.store import is_s3, objects_put

    if is_s3(storage):  # one PutObject per frame, several at a time (django-storages' save: a transfer each)
        try:
            objects_put(storage, files)
        except BaseException:
            frames_delete(storage, [name for name, _ in files])
            raise
        return [name for name, _ in files]
    written: list[str] = []
    try:
        for name, data in files:
            written.append(storage.save(name, ContentFile(data)))
    except BaseException:
        frames_delete(storage, written)
        raise
    return written


def _makedirs(folder: str, mode: int) -> None:
    old = os.umask(0)  # as FileSystemStorage does: the setting's mode exactly
    try:
        os.makedirs(folder, mode, exist_ok=True)
    finally:
        os.umask(old)
