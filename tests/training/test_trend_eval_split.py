"""The trend split with fewer than 2 episodes: the evaluation split is empty (an episode is never in both
splits, so nothing leaks), and the snapshot says so on its page and in its stats, with what to do."""

from __future__ import annotations

import json
import re

import pytest

from training.snapshot_services import snapshot_create
from training.storage import local_path

from .conftest import seed_episodes

pytestmark = pytest.mark.django_db

OPTIONS = {"png_folders": False, "trend": True, "trend_val_split": 0.5}


def _trend_rows(snapshot) -> dict[str, list[str]]:
    """Each trend split's source episodes, from the manifests on disk."""
    folder = local_path(snapshot.folder) / "trend"
    splits = {}
    for name in ("train", "eval"):
        path = folder / name / "segments.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        splits[name] = sorted({json.loads(line)["source_episode_path"] for line in lines})
    return splits


def test_one_episode_gives_an_empty_eval_split_and_says_so(project, user_client):
    seed_episodes(project, episodes=1, steps=20, size=16)
    snapshot = snapshot_create(project=project, options=OPTIONS)
    assert snapshot.status == "ready", snapshot.error
    trend = snapshot.stats["trend"]
    assert trend["num_train_samples"] > 0 and trend["num_eval_samples"] == 0
    assert trend["warning"].startswith("The trend evaluation split is empty: 1 episode(s) with windows")
    rows = _trend_rows(snapshot)
    assert len(rows["train"]) == 1 and rows["eval"] == []  # no window is both trained and evaluated on
    page = user_client.get(f"/snapshots/{snapshot.pk}/").content.decode()
    assert re.search(r'id="trend-warning">The trend evaluation split is empty', page)


def test_two_episodes_give_one_to_each_split_and_no_warning(project, user_client):
    seed_episodes(project, episodes=2, steps=20, size=16)
    snapshot = snapshot_create(project=project, options=OPTIONS)
    assert snapshot.status == "ready", snapshot.error
    trend = snapshot.stats["trend"]
    assert trend["num_eval_samples"] > 0 and trend["warning"] == ""
    rows = _trend_rows(snapshot)
    assert len(rows["train"]) == len(rows["eval"]) == 1 and rows["train"] != rows["eval"]
    assert 'id="trend-warning"' not in user_client.get(f"/snapshots/{snapshot.pk}/").content.decode()
