"""Heavy work runs in the Celery worker, never in the web request: in real Chromium a snapshot build and a
project-wide proposal generation are started from their pages, each page's progress bar is watched from
the first reading to the result, and meanwhile another page of the app loads in under a second (or, on a
machine too busy for that, within 3 times its load time before the work started)."""

from __future__ import annotations

import os
import re
import time
import uuid

import pytest

from labeling.models import Episode, FrameLabel, ProposalJob, Step
from tests.conftest import login
from tests.training.conftest import seed_episodes
from training.models import DatasetSnapshot

pytestmark = pytest.mark.e2e
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

# enough for the build and the generation to take a few seconds each, little enough to seed in a few
LABELED_EPISODES, LABELED_STEPS, EXTRA_EPISODES, EXTRA_STEPS = 40, 24, 40, 40
# The other page loads within a second, or, on a machine so busy that it loads slower than that while idle,
# within 3 times its idle load time (measured first, in the same test): work done inside the web request would
# hold it for the whole build or generation instead.
RESPONSIVE_S, BUSY_FACTOR = 1.0, 3.0


def _add_episodes(project, count: int, steps: int) -> None:
    """Finished episodes without frames (rows only): volume for the proposal job, none for the snapshot."""
    episodes = Episode.objects.bulk_create(
        Episode(project=project, uuid=uuid.uuid4(), status="finished", num_steps=steps, success=n % 2 == 0)
        for n in range(count)
    )
    Step.objects.bulk_create(
        (
            Step(episode=e, index=i, reward=i / steps, env_success=n % 2 == 0 and i >= steps // 2)
            for n, e in enumerate(episodes)
            for i in range(steps)
        ),
        batch_size=5000,
    )


def _load_time(page, url: str) -> float:
    """Seconds for another tab to load a full page (HTML, scripts, styles) of the app."""
    started = time.monotonic()
    response = page.goto(url, wait_until="load")
    assert response is not None and response.status == 200, url
    return time.monotonic() - started


def _watch(
    page, *, panel: str, bar: str, active: tuple[str, ...], other, other_url: str, timeout: float = 30
) -> tuple[list, list]:
    """Read the progress bar until the panel's status is no longer one of `active`; load `other_url` in the
    other tab after each reading. Returns the (status, value) readings and the other page's load times."""
    readings, loads = [], []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = page.locator(panel).get_attribute("data-status", timeout=5_000)
            value = int(page.locator(bar).get_attribute("value", timeout=5_000))
        except Exception:  # the page reloaded between the two reads
            continue
        readings.append((status, value))
        if status not in active:
            break
        loads.append(_load_time(other, other_url))
    return readings, loads


@pytest.mark.django_db(transaction=True)
def test_snapshot_build_and_proposal_generation_show_live_progress_while_the_app_answers(
    project, user, live_server_url, celery_worker_process, browser, screenshot_dir, monkeypatch
):
    # no per-episode proposal tasks for the seeded episodes: the worker runs only what this test starts
    monkeypatch.setattr("labeling.ingest.services._queue_proposals", lambda episode_id: None)
    seed_episodes(project, episodes=LABELED_EPISODES, steps=LABELED_STEPS, size=48, windows=False)
    _add_episodes(project, EXTRA_EPISODES, EXTRA_STEPS)
    total_episodes = LABELED_EPISODES + EXTRA_EPISODES

    context = browser.new_context(viewport={"width": 1300, "height": 900})
    try:
        page, other = context.new_page(), context.new_page()
        login(page, live_server_url, "alice", "pw-alice-123")
        training_url = f"{live_server_url}/projects/{project.pk}/training/"
        project_url = f"{live_server_url}/projects/{project.pk}/"

        # -- the snapshot: form on the training page, then the snapshot's page follows the build ----------------
        idle = sorted(_load_time(other, project_url) for _ in range(3))[1]
        responsive = max(RESPONSIVE_S, BUSY_FACTOR * idle)
        page.goto(training_url)
        form = page.locator("#snapshot-form")
        form.locator("input[name=val_split]").fill("0.34")
        form.locator("input[name=fail_success_ratio]").fill("1.0")
        form.locator("input[name=seed]").fill("0")
        form.locator("button[type=submit]").click()
        page.wait_for_url(re.compile(r".*/snapshots/\d+/$"))
        readings, loads = _watch(
            page,
            panel="#snapshot-progress",
            bar="#snapshot-bar",
            active=("building",),
            other=other,
            other_url=project_url,
        )
        print(f"snapshot: {len(readings)} readings {readings}; other page loads (s) {[round(t, 2) for t in loads]}")
        assert readings[0][0] == "building" and readings[-1] == ("ready", 100), readings
        assert [v for _, v in readings] == sorted(v for _, v in readings)  # the bar only moves forward
        assert loads and max(loads) < responsive, (loads, idle)
        assert re.search(
            r"Snapshot #1 written: \d+ train / \d+ val frames", page.locator("#snapshot-state").inner_text()
        )
        page.screenshot(path=str(screenshot_dir / "background_01_snapshot_ready.png"), full_page=True)
        snapshot = DatasetSnapshot.objects.get(project=project)
        assert snapshot.status == "ready" and snapshot.stats["episodes"] == LABELED_EPISODES

        # -- the proposals: "Generate proposals" on the project page opens the job's page --------------------
        page.goto(project_url)
        page.locator("#proposals [data-action=generate]").click()
        page.wait_for_url(re.compile(r".*/projects/\d+/proposals/\d+/$"))
        readings, loads = _watch(
            page,
            panel="#proposal-progress",
            bar="#proposal-bar",
            active=("queued", "running"),
            other=other,
            other_url=training_url,
        )
        print(f"proposals: {len(readings)} readings {readings}; other page loads (s) {[round(t, 2) for t in loads]}")
        statuses = [s for s, _ in readings]
        assert readings[-1] == ("succeeded", 100), readings
        assert "running" in statuses and any(0 < v < 100 for s, v in readings if s == "running"), readings
        assert [v for _, v in readings] == sorted(v for _, v in readings)
        assert loads and max(loads) < responsive, (loads, idle)
        assert page.locator("#proposal-state").inner_text() == "Proposals generated"
        assert int(page.locator("#summary-episodes").inner_text()) == total_episodes
        page.screenshot(path=str(screenshot_dir / "background_02_proposals_done.png"), full_page=True)
        job = ProposalJob.objects.get(project=project)
        assert (job.status, job.done, job.total) == ("succeeded", total_episodes, total_episodes)
        assert FrameLabel.objects.filter(project=project, source="proposal").count() == (
            LABELED_EPISODES * LABELED_STEPS + EXTRA_EPISODES * EXTRA_STEPS
        )
    finally:
        context.close()
        # a job left running (a failed assertion) is cancelled, so the worker is idle when the database is flushed
        if ProposalJob.objects.filter(status__in=ProposalJob.lifecycle.active).update(status="cancelled"):
            time.sleep(2)
