"""Storage-relative folders to local paths for torch (which reads and writes real files).

Reads go through `common.filestore`: MEDIA_ROOT's own path with the local storage, this machine's
cache with an object store. Jobs write into `work_folder` and publish it when complete.

Data-parallel jobs on several nodes (torchrun) need no shared disk with an object store: every rank asks for
the snapshot through its node's cache (the first process of a node fetches it, the others on that node wait
for it and reuse it), only global rank 0 writes the checkpoint (node 0's work folder, which the training
worker publishes when the job ends), and `resume_state_share` gives every node rank 0's resume state."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from common.filestore.services import storage_is_local, stored_local


def local_path(name: str) -> Path:
    """The local file or folder with stored `name`'s content; a path that does not exist when there is none
    (or it is not completely published), as MEDIA_ROOT's own path would be."""
    try:
        return stored_local(name)
    except FileNotFoundError:
        return Path(settings.STORAGE_CACHE_DIR) / "missing" / name


def resume_state_share(out_dir: Path) -> None:
    """Under torchrun with an object store (no shared disk), make each node's work folder hold global rank 0's
    resume state, or none when rank 0 has none, so that every rank resumes from the same step (rank 0 alone
    saves it; another node's folder has none, or a stale one). A collective: every rank calls it. Nothing to
    do alone, or when the storage is local (the nodes share MEDIA_ROOT, so the work folder)."""
    from .kit import distributed
    from .kit.resume import state_path

    info = distributed.current()
    if not info.distributed or storage_is_local():
        return
    path = state_path(out_dir)
    state = distributed.broadcast_object(path.read_bytes() if info.main and path.exists() else None)
    if not info.main and info.local_rank == 0:  # one writer per node; node 0's folder is rank 0's own
        if state is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.node-{info.rank}.tmp")
            tmp.write_bytes(state)
            os.replace(tmp, path)
    distributed.barrier()  # the node's other ranks read it after


def resume_state_copy_drop(out_dir: Path) -> None:
    """A node's copy of rank 0's resume state (`resume_state_share`), removed once the job has trained (rank 0
    clears its own)."""
    from .kit import distributed
    from .kit.resume import state_clear

    info = distributed.current()
    if info.distributed and not info.main and info.local_rank == 0 and not storage_is_local():
        state_clear(out_dir)
