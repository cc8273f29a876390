"""Several runs' curves on one chart, in real Chromium: the runs named in the URL are drawn, ticking another
adds it, the smoothing slider smooths each run's points with W&B's debiased exponential moving average, the
metric can change, and the picks stay in the URL."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.conftest import login
from training.models import DatasetSnapshot, JobMetric, TrainingJob

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def ema(values: list[float], weight: float) -> list[float]:
    """W&B's smoothing, written here from its definition (not the page's code)."""
    out, last = [], 0.0
    for n, value in enumerate(values, start=1):
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**n))
    return out


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_runs_overlay_with_smoothing(browser, live_server_url, user, project, screenshot_dir):
    snapshot = DatasetSnapshot.objects.create(project=project, number=1, status="ready", stats={})
    rng = np.random.default_rng(0)
    jobs, losses = [], {}
    for n in range(3):
        job = TrainingJob.objects.create(project=project, snapshot=snapshot, name=f"run-{n}", status="succeeded")
        losses[job.pk] = [float(v) for v in np.exp(-np.arange(30) / (8 + 4 * n)) + rng.normal(0, 0.05, 30)]
        JobMetric.objects.bulk_create(
            [JobMetric(job=job, kind="step", step=s, values={"train_loss": v}) for s, v in enumerate(losses[job.pk])]
            + [
                JobMetric(job=job, kind="epoch", step=10 * e + 9, epoch=e, values={"val_acc": 0.5 + 0.1 * e + 0.01 * n})
                for e in range(3)
            ]
        )
        jobs.append(job)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/projects/{project.pk}/training/")
    page.click("#runs-link")
    page.wait_for_selector("#runs-chart[data-ready='1']")
    # the latest three by default, val acc by epoch
    shown = page.evaluate("() => window.__runs.series.map((s) => s.job)")
    assert sorted(shown) == sorted(j.pk for j in jobs)
    assert page.evaluate("() => window.__runs.x") == [9, 19, 29]

    page.goto(f"{live_server_url}/projects/{project.pk}/runs/?jobs={jobs[0].pk},{jobs[2].pk}&metric=train_loss")
    page.wait_for_selector("#runs-chart[data-ready='1']")
    assert page.evaluate("() => window.__runs.series.map((s) => s.job)") == [jobs[2].pk, jobs[0].pk]  # newest first
    page.check(f"#runs-choices input[value='{jobs[1].pk}']")
    page.wait_for_function("() => window.__runs.series.length === 3")
    page.locator("#runs-smoothing").fill("0.6")
    page.wait_for_function("() => document.getElementById('runs-smoothing-value').textContent === '0.60'")
    for series in page.evaluate("() => window.__runs.series"):
        assert series["raw"] == pytest.approx(losses[series["job"]])
        assert series["smoothed"] == pytest.approx(ema(losses[series["job"]], 0.6))
    assert page.locator("#runs-chart canvas").count() == 1
    assert "smoothing=0.60" in page.url and "metric=train_loss" in page.url
    page.screenshot(path=str(screenshot_dir / "training_runs_overlay.png"), full_page=True)
    page.uncheck(f"#runs-choices input[value='{jobs[0].pk}']")
    page.wait_for_function("() => window.__runs.series.length === 2")
    assert errors == []
    page.close()
