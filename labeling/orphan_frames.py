"""Frame files no row references, swept: a web process killed between writing a chunk's frame files and
committing its rows leaves files behind (`frames_write` removes its files on an exception, not on `kill -9`);
an agent that retries the chunk overwrites them (same names), one that never retries leaves them for good.

`orphan_frames_sweep` (beat's `labeling.tasks.sweep_orphan_frames`, every ORPHAN_FRAMES_SWEEP_SECONDS) walks
the local frame store (`frames/<project>/<episode uuid>/`), and removes each file older than
ORPHAN_FRAMES_GRACE_SECONDS that no Frame row names; a file being written now is young, so its chunk's
transaction has long ended before the sweep may look at it. Folders left empty go too. Only the local
file system is swept (another storage is left alone, with a log line).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import asdict, dataclass

from django.conf import settings
from django.core.files.storage import Storage, default_storage

from .frame_files import writes_in_place
from .models import Frame

logger = logging.getLogger(__name__)

ROOT = "frames"
QUERY_CHUNK = 1000  # names per `image IN (...)` query


@dataclass
class OrphanSweep:
    """What one sweep did: files past the grace period checked, files removed and their bytes."""

    checked: int = 0
    removed: int = 0
    removed_bytes: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def orphan_frames_sweep(
    *, grace_seconds: float | None = None, now: float | None = None, storage: Storage = default_storage
) -> OrphanSweep:
    """Remove frame files older than `grace_seconds` (ORPHAN_FRAMES_GRACE_SECONDS) that no Frame row names."""
    outcome = OrphanSweep()
    if not writes_in_place(storage):
        logger.info("orphan frame sweep skipped: %s is not the local file system", storage.__class__.__name__)
        return outcome
    grace = float(settings.ORPHAN_FRAMES_GRACE_SECONDS if grace_seconds is None else grace_seconds)
    older_than = (time.time() if now is None else now) - grace
    root = storage.path(ROOT)
    for project in _subfolders(root):
        for episode in _subfolders(os.path.join(root, project)):
            _sweep_folder(storage, f"{ROOT}/{project}/{episode}", older_than, outcome)
    if outcome.removed:
        logger.warning(
            "orphan frame sweep: removed %d files (%d bytes) no frame row names", outcome.removed, outcome.removed_bytes
        )
    return outcome


def _subfolders(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def _sweep_folder(storage: Storage, folder: str, older_than: float, outcome: OrphanSweep) -> None:
    path = storage.path(folder)
    old: dict[str, tuple[str, int]] = {}  # stored name -> (file path, size)
    with os.scandir(path) as entries:
        for entry in entries:
            if not entry.is_file(follow_symlinks=False):
                continue
            stat = entry.stat(follow_symlinks=False)
            if stat.st_mtime < older_than:
                old[f"{folder}/{entry.name}"] = (entry.path, stat.st_size)
    outcome.checked += len(old)
    names = sorted(old)
    referenced: set[str] = set()
    for i in range(0, len(names), QUERY_CHUNK):
        chunk = names[i : i + QUERY_CHUNK]
        referenced.update(Frame.objects.filter(image__in=chunk).values_list("image", flat=True))
    for name in names:
        if name in referenced:
            continue
        file_path, size = old[name]
        try:
            os.remove(file_path)
        except FileNotFoundError:
            continue
        outcome.removed += 1
        outcome.removed_bytes += size
    if old and len(referenced) < len(old):
        with contextlib.suppress(OSError):
            os.rmdir(path)  # only when nothing is left in it
