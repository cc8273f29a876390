"""The per-project snapshot quota (SNAPSHOT_PROJECT_QUOTA_BYTES): a build that would take the project's
snapshots over it fails before writing, with the reason; a project whose snapshots fill it is refused a new
one at once (400 over the API, an error on the page); 0 means no quota."""

from __future__ import annotations

import pytest

from training.models import DatasetSnapshot
from training.snapshots.quota import frames_raw_bytes, snapshots_disk_bytes
from training.snapshots.services import snapshot_create
from training.storage import local_path

OPTIONS = {"val_split": 0.34, "trend": False, "png_folders": False}


@pytest.mark.django_db
def test_a_snapshot_over_the_projects_quota_is_refused_with_the_reason(labeled_project, user_client, settings):
    settings.SNAPSHOT_PROJECT_QUOTA_BYTES = 64 * 1024**2
    first = snapshot_create(project=labeled_project, options=OPTIONS)
    assert first.status == "ready", first.error
    used = snapshots_disk_bytes(project=labeled_project)
    assert used > 0 and used == sum(p.stat().st_size for p in local_path(first.folder).rglob("*") if p.is_file())
    frames = first.stats["train"]["total"] + first.stats["val"]["total"]
    assert frames_raw_bytes([f.image.name for f in _frames(labeled_project)]) == 60 * 32 * 32 * 3

    settings.SNAPSHOT_PROJECT_QUOTA_BYTES = used + 1000  # room left, but less than the frames need
    second = snapshot_create(project=labeled_project, options=OPTIONS)
    assert second.status == "failed"
    need, have, quota = frames * 32 * 32 * 3 / 1024**2, used / 1024**2, (used + 1000) / 1024**2
    assert second.error == (
        f"this snapshot's {frames} frames need {need:.1f} MiB as raw pixels and the project's other snapshots take "
        f"{have:.1f} MiB: more than its {quota:.1f} MiB quota (SNAPSHOT_PROJECT_QUOTA_BYTES); delete older "
        "snapshots of the project, or sample fewer frames per episode (num_samples_per_episode)"
    )
    assert not local_path(second.folder).exists()  # nothing written, nothing left
    assert snapshots_disk_bytes(project=labeled_project) == used

    settings.SNAPSHOT_PROJECT_QUOTA_BYTES = used  # full: refused before a row is made
    refused = user_client.post(f"/api/projects/{labeled_project.pk}/snapshots", {}, content_type="application/json")
    assert refused.status_code == 400
    assert (
        f"the project's snapshots already take {have:.1f} MiB of its {have:.1f} MiB quota" in refused.json()["detail"]
    )
    page = user_client.post(
        f"/projects/{labeled_project.pk}/training/snapshots/new",
        {"sources": ["human"], "camera": "main", "num_samples_per_episode": 0, "keep_last_frame": "on",
         "val_split": 0.34, "fail_success_ratio": 2.0, "seed": 42, "trend_val_split": 0.1},
    )  # fmt: skip
    assert page.status_code == 400 and b"SNAPSHOT_PROJECT_QUOTA_BYTES" in page.content
    assert DatasetSnapshot.objects.filter(project=labeled_project).count() == 2

    settings.SNAPSHOT_PROJECT_QUOTA_BYTES = 0  # no quota
    assert snapshot_create(project=labeled_project, options=OPTIONS).status == "ready"


def _frames(project):
    from labeling.models import Frame

    return Frame.objects.filter(step__episode__project=project, camera="main")
