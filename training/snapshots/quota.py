"""The per-project snapshot quota (SNAPSHOT_PROJECT_QUOTA_BYTES): a project's snapshots together may take
this much disk. A new snapshot is refused at once when the project's snapshots already fill it, and a build
fails with the reason, before it writes anything, when its frames (the payloads store raw pixels:
width x height x 3 bytes each) would take it over."""

from __future__ import annotations

from django.conf import settings

from common.filestore.services import stored_folder_bytes
from labeling.models import Frame
from projects.models import Project

from ..models import DatasetSnapshot

GIB = 1024**3


class QuotaExceeded(ValueError):
    """A snapshot the project's quota leaves no room for; the message says how much and what to do."""


def snapshots_disk_bytes(*, project: Project, exclude: int | None = None) -> int:
    """Bytes on disk of the project's snapshot folders (all but `exclude`)."""
    total = 0
    snapshots = DatasetSnapshot.objects.filter(project=project)
    for snapshot in snapshots.exclude(pk=exclude) if exclude is not None else snapshots:
        total += stored_folder_bytes(snapshot.folder)
    return total


def frames_raw_bytes(images: list[str]) -> int:
    """Width x height x 3 bytes summed over the frames stored under these names (each counted once)."""
    names, total = sorted(set(images)), 0
    for start in range(0, len(names), 2000):
        sizes = Frame.objects.filter(image__in=names[start : start + 2000]).values_list("width", "height")
        total += sum(width * height * 3 for width, height in sizes)
    return total


def _size(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB // 10 else f"{n / 1024**2:.1f} MiB"


SETTING = "quota (SNAPSHOT_PROJECT_QUOTA_BYTES); delete older snapshots of the project"


def quota_room_check(*, project: Project) -> None:
    """QuotaExceeded when the project's snapshots already fill its quota (checked when a snapshot is asked for)."""
    quota = settings.SNAPSHOT_PROJECT_QUOTA_BYTES
    if quota and (used := snapshots_disk_bytes(project=project)) >= quota:
        raise QuotaExceeded(f"the project's snapshots already take {_size(used)} of its {_size(quota)} {SETTING}")


def quota_build_check(*, snapshot: DatasetSnapshot, images: list[str]) -> None:
    """QuotaExceeded when writing these frames would take the project's snapshots over its quota."""
    quota = settings.SNAPSHOT_PROJECT_QUOTA_BYTES
    if not quota:
        return
    used = snapshots_disk_bytes(project=snapshot.project, exclude=snapshot.pk)
    needed = frames_raw_bytes(images)
    if used + needed > quota:
        raise QuotaExceeded(
            f"this snapshot's {len(set(images))} frames need {_size(needed)} as raw pixels and the project's other "
            f"snapshots take {_size(used)}: more than its {_size(quota)} {SETTING}, or sample fewer frames per "
            "episode (num_samples_per_episode)"
        )
