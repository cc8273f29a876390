"""A snapshot build started from the training page runs in the Celery worker: in real Chromium the page
lands on the snapshot's page, which shows a progress bar while building and then the result, and the rest of
the app answers meanwhile (the web process never builds the files itself)."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.conftest import login
from training.models import DatasetSnapshot

from .conftest import seed_episodes

pytestmark = pytest.mark.e2e
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _timed_get(page, url: str) -> float:
    started = time.monotonic()
    response = page.request.get(url)
    assert response.status == 200, url
    return time.monotonic() - started


@pytest.mark.django_db(transaction=True)
def test_snapshot_builds_in_the_worker_with_a_live_progress_bar(
    project, user, live_server_url, celery_worker_process, browser, screenshot_dir, monkeypatch
):
    # no proposal tasks for the seeded episodes: the worker only builds the snapshot (and is idle at teardown)
    monkeypatch.setattr("labeling.ingest.services._queue_proposals", lambda episode_id: None)
    seed_episodes(project, episodes=15, steps=16, size=48, windows=False)
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    login(page, live_server_url, "alice", "pw-alice-123")
    other_page = f"{live_server_url}/projects/{project.pk}/training/"
    page.goto(other_page)

    # the worker is paused, so the build waits in the queue: the POST must still answer at once
    os.kill(celery_worker_process.pid, signal.SIGSTOP)
    try:
        form = page.locator("#snapshot-form")
        form.locator("input[name=val_split]").fill("0.34")
        form.locator("input[name=fail_success_ratio]").fill("1.0")
        form.locator("input[name=seed]").fill("0")
        started = time.monotonic()
        form.locator("button[type=submit]").click()
        page.wait_for_url(re.compile(r".*/snapshots/\d+/$"))
        assert time.monotonic() - started < 10
        progress = page.locator("#snapshot-progress")
        assert progress.get_attribute("data-status") == "building"
        assert page.locator("#snapshot-bar").get_attribute("value") == "0"
        assert "Building snapshot #1" in page.locator("#snapshot-state").inner_text()
        page.screenshot(path=str(screenshot_dir / "snapshot_01_building.png"), full_page=True)
        # another page answers while the snapshot is building
        assert _timed_get(page, other_page) < 5
        assert DatasetSnapshot.objects.get(project=project).status == "building"
    finally:
        os.kill(celery_worker_process.pid, signal.SIGCONT)

    # the worker builds; the page refreshes itself until the result, the app keeps answering
    seen, answers, deadline = [], [], time.monotonic() + 40
    while time.monotonic() < deadline:
        try:
            status = progress.get_attribute("data-status", timeout=5_000)
            seen.append((status, int(page.locator("#snapshot-bar").get_attribute("value", timeout=5_000))))
        except Exception:  # the page reloaded between the two reads
            continue
        if status != "building":
            break
        answers.append(_timed_get(page, other_page))
    assert seen and seen[-1] == ("ready", 100), seen
    assert [value for _, value in seen] == sorted(value for _, value in seen)  # the bar only moves forward
    assert all(elapsed < 5 for elapsed in answers), answers
    assert re.search(r"Snapshot #1 written: \d+ train / \d+ val frames", page.locator("#snapshot-state").inner_text())
    assert int(page.locator("#stats-episodes").inner_text()) == 15
    page.screenshot(path=str(screenshot_dir / "snapshot_02_ready.png"), full_page=True)

    snapshot = DatasetSnapshot.objects.get(project=project)
    assert snapshot.status == "ready" and snapshot.frames_done == snapshot.frames_total > 0
    page.click("#back-to-training")
    assert page.locator("#snapshots").get_by_text("ready").count() == 1
