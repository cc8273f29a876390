"""The evaluation page in a browser: its first open right after the job finished answers within 1 s (its figures
were computed by the training task), and an older model's page shows progress at once, then fills by itself."""

from __future__ import annotations

import os
import time
from unittest import mock

import pytest

from tests.conftest import login
from tests.training.conftest import seed_episodes
from tests.training.test_pages_and_api import TINY

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread

NAVIGATION = (
    "(() => { const n = performance.getEntriesByType('navigation')[0]; return n.responseEnd - n.startTime; })()"
)


def trained_model(project):
    """A tiny ResNet trained by job_execute on seeded episodes, as the training task leaves it."""
    from training.models import TrainedModel
    from training.services import job_create, job_execute
    from training.snapshots.services import snapshot_build, snapshot_create

    with mock.patch("labeling.ingest.services._queue_proposals"):  # no proposal tasks for a worker that is not there
        seed_episodes(project)
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "trend": False})
    snapshot_build(snapshot_id=snapshot.pk)
    job = job_create(project=project, snapshot=snapshot, config=TINY, enqueue=False)
    job_execute(job_id=job.pk)
    return TrainedModel.objects.get(job=job)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_first_open_after_the_job_finished_answers_within_a_second(browser, live_server_url, project):
    model = trained_model(project)
    page = browser.new_page()
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/jobs/{model.job_id}/")  # where the user comes from

    started = time.perf_counter()
    page.goto(f"{live_server_url}/models/{model.pk}/evaluation")
    page.locator("[data-precision=bf16]").wait_for()
    shown = time.perf_counter() - started
    answered_ms = page.evaluate(NAVIGATION)
    print(f"evaluation page first open: answered in {answered_ms:.0f} ms, figures shown after {shown:.2f} s")
    assert answered_ms <= 1000 and page.locator("#evaluation-progress").count() == 0
    page.close()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_an_older_models_page_shows_progress_at_once_and_fills_by_itself(
    browser, live_server_url, celery_worker_process, project
):
    from training.resnet.val_predictions import VAL_PREDICTIONS
    from training.storage import local_path

    model = trained_model(project)
    folder = local_path(model.checkpoint_path)
    for stale in [folder / VAL_PREDICTIONS, *folder.glob("val_precisions_snapshot_*.json")]:
        stale.unlink()  # as a model trained before the figures were computed at the job's end
    page = browser.new_page()
    login(page, live_server_url, "alice", "pw-alice-123")

    page.goto(f"{live_server_url}/models/{model.pk}/evaluation")
    progress = page.locator("#evaluation-progress")
    assert "step 1 of 3: queued" in progress.inner_text() and page.evaluate(NAVIGATION) <= 1000
    # the worker computes them (training.tasks.compute_evaluation); the page reloads by itself until they are there
    page.locator("[data-precision=bf16]").wait_for(timeout=90_000)
    assert page.locator("#evaluation-progress").count() == 0
    assert (folder / VAL_PREDICTIONS).exists() or list(folder.glob("val_predictions_snapshot_*.json"))
    page.close()
