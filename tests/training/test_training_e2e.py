"""A new user's path in real Chromium: snapshot, queue a job, watch the live curves, open the evaluation,
pick a threshold, follow a frame to the labeling page. Screenshots go to artifacts/screenshots."""

from __future__ import annotations

import os
import re
import time

import pytest

from tests.conftest import login
from training.models import TrainedModel
from training.services import job_create

from .conftest import seed_episodes

pytestmark = pytest.mark.e2e
# Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are still synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.mark.django_db(transaction=True)
def test_queue_a_job_watch_curves_and_pick_a_threshold(
    project, user, live_server_url, celery_worker_process, browser, screenshot_dir
):
    seed_episodes(project, episodes=15, steps=16, size=48, windows=False)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    login(page, live_server_url, "alice", "pw-alice-123")

    page.goto(f"{live_server_url}/projects/{project.pk}/training/")
    form = page.locator("#snapshot-form")
    form.locator("input[name=val_split]").fill("0.34")
    form.locator("input[name=fail_success_ratio]").fill("1.0")
    form.locator("input[name=seed]").fill("0")  # 3 of the 5 validation episodes succeed: 48 val frames
    form.locator("button[type=submit]").click()
    page.wait_for_url(re.compile(r".*/snapshots/\d+/$"))  # the build runs in the worker; its page refreshes
    page.wait_for_selector("text=Snapshot #1 written", timeout=60_000)
    page.click("#back-to-training")

    job = page.locator("#job-form")
    job.locator("#job-advanced > summary").click()  # the model and optimiser fields are folded
    for name, value in {
        "image_height": "32",
        "image_width": "32",
        "hidden_dim": "32",
        "lr": "0.0003",
        "warmup_steps": "0",
        "batch_size": "8",
        "epochs": "3",
        "patience": "0",
        "seed": "0",
        "num_threads": "1",
    }.items():
        job.locator(f"[name={name}]").fill(value)
    page.screenshot(path=str(screenshot_dir / "training_01_project_page.png"), full_page=True)
    job.locator("button[type=submit]").click()
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    page.wait_for_function("document.body.dataset.ws === 'open'", timeout=20_000)

    # the curves move while the job runs: the progress text changes and epoch rows appear
    page.wait_for_function("document.querySelector('#latest [data-metric=val_acc]') !== null", timeout=120_000)
    page.screenshot(path=str(screenshot_dir / "training_02_job_running.png"), full_page=True)
    page.wait_for_function("document.getElementById('status').textContent === 'succeeded'", timeout=120_000)
    assert page.locator("#progress-text").inner_text() == "100%"
    assert page.locator(".messages li", has_text="queued").count() == 0  # the form's notice left with the queue
    assert page.locator("#cancel-btn").evaluate("b => getComputedStyle(b).cursor") == "not-allowed"
    assert page.locator("#loss-chart canvas").count() == 1
    page.screenshot(path=str(screenshot_dir / "training_03_job_done.png"), full_page=True)

    page.click("text=Open the evaluation")
    page.wait_for_selector(".gallery a")
    accuracy = page.locator("[data-metric=accuracy]").inner_text()
    assert accuracy.endswith("%") and float(accuracy[:-1]) >= 90
    page.screenshot(path=str(screenshot_dir / "training_04_evaluation.png"), full_page=True)
    page.locator("#threshold").fill("0.95")
    assert page.locator("#threshold-value").inner_text() == "0.95"
    assert "probability &gt; 0.95" in page.locator(".rl-preview").inner_html()
    page.screenshot(path=str(screenshot_dir / "training_05_threshold.png"), full_page=True)
    href = page.locator(".gallery a").first.get_attribute("href")
    assert re.match(r"^/episodes/[0-9a-f-]{36}/label/\?step=\d+$", href)
    page.locator(".gallery a").first.click()  # the most confidently wrong frame, in the labeling page
    page.wait_for_url(re.compile(r".*/episodes/[0-9a-f-]{36}/label/\?step=\d+$"))
    assert page.title() and "Page not found" not in page.content()

    # a second model (fewer epochs), then both side by side on the same snapshot
    first = TrainedModel.objects.get(project=project)
    second_job = job_create(project=project, snapshot=first.snapshot, config={**first.config, "epochs": 1, "seed": 3})
    deadline = time.monotonic() + 120
    while not TrainedModel.objects.filter(job=second_job).exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    second = TrainedModel.objects.get(job=second_job)
    page.goto(f"{live_server_url}/projects/{project.pk}/compare?a={first.pk}&b={second.pk}")
    page.wait_for_selector(".eval-column >> nth=1")
    assert page.locator(".eval-column").count() == 2
    page.locator("#threshold").fill("0.3")
    assert page.locator("[data-metric=accuracy]").count() == 2
    page.screenshot(path=str(screenshot_dir / "training_06_compare.png"), full_page=True)
    page.close()
