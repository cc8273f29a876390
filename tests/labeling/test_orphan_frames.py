"""Frame files no row names (a web process killed between writing a chunk's files and committing its rows,
an agent that never retried) are removed by the beat sweep once older than ORPHAN_FRAMES_GRACE_SECONDS; the
files rows name, and young files (a chunk being written now), are kept."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from django.core.files.storage import default_storage

from labeling.models import Frame
from labeling.tasks import sweep_orphan_frames

from .factories import episode_with_frames

pytestmark = pytest.mark.django_db

GRACE_S = 3600


def _file(name: str, *, age_s: float, data: bytes = b"\x89PNG orphan") -> str:
    path = default_storage.path(name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    old = time.time() - age_s
    os.utime(path, (old, old))
    return path


def test_the_sweep_removes_old_unreferenced_frame_files_and_keeps_the_rest(project, settings):
    settings.ORPHAN_FRAMES_GRACE_SECONDS = GRACE_S
    episode = episode_with_frames(project=project, num_steps=4, size=16)
    kept = list(Frame.objects.filter(step__episode=episode).values_list("image", flat=True))
    assert kept
    for name in kept:  # referenced files as old as the orphans: age alone removes nothing
        old = time.time() - 10 * GRACE_S
        os.utime(default_storage.path(name), (old, old))
    folder = f"frames/{project.pk}/{episode.uuid}"
    killed_mid_chunk = [_file(f"{folder}/{i:06d}_main.png", age_s=2 * GRACE_S) for i in (4, 5)]
    being_written = _file(f"{folder}/000006_main.png", age_s=5)
    gone_episode = f"frames/{project.pk}/{uuid.uuid4()}"
    lost_folder = [_file(f"{gone_episode}/000000_main.png", age_s=2 * GRACE_S, data=b"x" * 1000)]

    outcome = sweep_orphan_frames()  # what beat runs

    assert outcome["removed"] == 3 and outcome["removed_bytes"] == 2 * len(b"\x89PNG orphan") + 1000
    assert not any(os.path.exists(p) for p in killed_mid_chunk + lost_folder)
    assert not os.path.exists(default_storage.path(gone_episode))  # its folder, left empty, went too
    assert os.path.exists(being_written)
    assert all(default_storage.exists(name) for name in kept)
    assert sweep_orphan_frames()["removed"] == 0  # nothing more on a second pass
