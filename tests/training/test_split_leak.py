"""A frame split is never silent: when validation shares episodes with training, the snapshot's stats and
snapshot.json, its page, its API answer and the evaluation page say so (real PostgreSQL and storage)."""

from __future__ import annotations

import json
import re

import pytest

from training.datasets.binary_split import leak_warning, shared_episodes, split_leak
from training.storage import local_path

from .conftest import seed_episodes

TINY = {"hidden_dim": 16, "image_size": [3, 32, 32], "epochs": 1, "batch_size": 16, "warmup_steps": 0, "num_threads": 1}


def test_shared_episodes_are_those_with_frames_on_both_sides():
    assert shared_episodes(["a", "b", "c"], ["c", "d", "a"]) == ["c", "a"]
    assert shared_episodes(["a"], ["b"]) == []
    assert leak_warning(0, 3) == ""
    assert leak_warning(2, 3).startswith("Validation shares 2 of its 3 episode(s) with training")


def test_stats_written_before_the_count_existed_still_give_the_leak():
    old = {"split": "frame", "train_episodes": ["a", "b"], "val_episodes": ["b"]}
    shared, warning = split_leak(old)
    assert shared == 1 and "shares 1 of its 1 episode(s)" in warning
    assert split_leak({"split": "episode", "train_episodes": ["a"], "val_episodes": ["b"]}) == (0, "")
    assert split_leak({}) == (0, "")


@pytest.mark.django_db
def test_an_auto_split_that_falls_back_to_frames_says_validation_shares_episodes(project, user_client):
    from training.models import TrainedModel
    from training.services import job_create, job_execute
    from training.snapshots.services import snapshot_create

    seed_episodes(project, episodes=1, steps=20, size=16, windows=False)
    snapshot = snapshot_create(project=project, options={"png_folders": False, "trend": False})
    assert snapshot.status == "ready", snapshot.error
    stats = snapshot.stats
    assert stats["split"] == "frame" and stats["shared_episodes"] == 1
    assert stats["split_warning"].startswith("Validation shares 1 of its 1 episode(s) with training")
    on_disk = json.loads((local_path(snapshot.folder) / "snapshot.json").read_text())["stats"]
    assert on_disk["shared_episodes"] == 1 and on_disk["split_warning"] == stats["split_warning"]

    page = user_client.get(f"/snapshots/{snapshot.pk}/").content.decode()
    assert re.search(r'id="split-warning">Validation shares 1 of its 1 episode', page)
    assert "(1 episode(s) in train and val)" in page
    answer = user_client.get(f"/api/snapshots/{snapshot.pk}").json()
    assert answer["shared_episodes"] == 1 and answer["split_warning"] == stats["split_warning"]

    job = job_create(project=project, snapshot=snapshot, config=TINY, enqueue=False)
    job_execute(job_id=job.pk)
    model = TrainedModel.objects.get(job=job)
    evaluation = user_client.get(f"/api/models/{model.pk}/evaluation").json()
    assert evaluation["snapshot"]["split"] == "frame" and evaluation["snapshot"]["shared_episodes"] == 1
    assert evaluation["snapshot"]["split_warning"] == stats["split_warning"]
    page = user_client.get(f"/models/{model.pk}/evaluation").content.decode()
    assert "Validation shares 1 of its 1 episode(s)" in page  # in the page data its script renders


@pytest.mark.django_db
def test_an_episode_split_carries_no_warning(project, user_client):
    from training.snapshots.services import snapshot_create

    seed_episodes(project, episodes=6, steps=10, size=16, windows=False)
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "png_folders": False, "trend": False})
    assert snapshot.status == "ready", snapshot.error
    assert snapshot.stats["split"] == "episode"
    assert snapshot.stats["shared_episodes"] == 0 and snapshot.stats["split_warning"] == ""
    assert not set(snapshot.stats["train_episodes"]) & set(snapshot.stats["val_episodes"])
    assert 'id="split-warning"' not in user_client.get(f"/snapshots/{snapshot.pk}/").content.decode()
