"""The job page's loss chart in real Chromium: a first epoch far above the rest (the tour's 8.4) does not set
the scale; the later points fill the chart, and "log scale" shows every point on a logarithmic axis."""

from __future__ import annotations

import os

import pytest

from tests.conftest import login
from training.models import DatasetSnapshot, JobMetric, TrainingJob

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_first_epochs_spike_does_not_set_the_loss_scale_and_log_scale_shows_it(
    browser, live_server_url, user, project, screenshot_dir
):
    snapshot = DatasetSnapshot.objects.create(project=project, number=1, status="ready", stats={})
    job = TrainingJob.objects.create(project=project, snapshot=snapshot, name="spiky", status="succeeded")
    losses = [8.4, 5.1, 2.0] + [0.6 - 0.01 * s for s in range(3, 60)]
    JobMetric.objects.bulk_create(
        [JobMetric(job=job, kind="step", step=s, values={"train_loss": v}) for s, v in enumerate(losses)]
        + [JobMetric(job=job, kind="epoch", step=19 + 20 * e, epoch=e + 1, values={"val_loss": 0.5}) for e in range(3)]
    )
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/jobs/{job.pk}/")
    page.wait_for_function("() => window.__lossChart && window.__lossChart.data[0].length === 60")
    top = page.evaluate("() => window.__lossChart.scales.y.max")
    assert 0.6 <= top < 1.5  # the later points fill the chart; 8.4 and 5.1 are clipped
    page.screenshot(path=str(screenshot_dir / "job-loss-clipped.png"))

    page.check("#loss-log")
    page.wait_for_function("() => window.__lossChart.scales.y.distr === 3 && window.__lossChart.data[0].length === 60")
    assert page.evaluate("() => window.__lossChart.scales.y.max") >= 8.4  # every point, the spike included
    assert page.locator("#loss-chart canvas").count() == 1  # the chart was rebuilt, not stacked
    page.screenshot(path=str(screenshot_dir / "job-loss-log.png"))
    assert errors == []
