"""The evaluation page's inference-precision panel in a browser: bf16 against fp32 measured on this CPU, its flipped
decisions recounted as the threshold slider moves, and fp16 refused here with the reason."""

from __future__ import annotations

import os
from unittest import mock

import pytest

from tests.conftest import login
from tests.training.conftest import seed_episodes
from tests.training.test_pages_and_api import TINY
from training.evaluation.metrics import precision_difference

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_panel_recounts_flipped_decisions_as_the_threshold_moves(browser, live_server_url, project):
    from training.models import TrainedModel
    from training.services import job_create, job_execute
    from training.snapshots.services import snapshot_build, snapshot_create

    with mock.patch("labeling.ingest.services._queue_proposals"):  # no proposal tasks for a worker that is not there
        seed_episodes(project)
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "trend": False})
    snapshot_build(snapshot_id=snapshot.pk)
    job = job_create(project=project, snapshot=snapshot, config=TINY, enqueue=False)
    job_execute(job_id=job.pk)
    model = TrainedModel.objects.get(job=job)

    page = browser.new_page()
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/models/{model.pk}/evaluation")
    bf16_row = page.locator("[data-precision=bf16]")
    bf16_row.wait_for()
    data = page.request.get(f"{live_server_url}/api/models/{model.pk}/evaluation").json()
    bf16 = data["precisions"][0]
    reference = data["probabilities"][: bf16["frames"]]
    for threshold in ("0.5", "0.49", "0.51", "0.3"):
        page.locator("#threshold").fill(threshold)
        flips = precision_difference(reference, bf16["probabilities"], float(threshold))[2]
        assert bf16_row.locator("[data-flips]").inner_text() == f"{flips} of {bf16['frames']}"
    assert bf16_row.locator("td").first.inner_text() == f"{bf16['max_abs']:.2e}".replace("e-0", "e-")
    assert "fp16 on the CPU" in page.locator("[data-precision=fp16]").inner_text()
    page.close()
