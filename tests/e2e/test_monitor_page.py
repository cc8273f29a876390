"""The reward-hacking monitor's charts in a real browser: a deployment nothing was served from says so in
each chart instead of drawing bare axes, and once an RL run's batches (with env flags and episode ids) are
recorded, the rates over time and the success rate per episode step are drawn, and the frames the model
flagged off-distribution are counted and drawn over time."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import login

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_monitor_charts_say_what_they_wait_for_then_draw_the_served_batches(browser, live_server_url, project):
    from asgiref.sync import async_to_sync

    from inference.broker import dump_npy
    from inference.monitor.services import ServedBatch, monitor_flush, monitor_submit
    from inference.serving import deployment_config
    from tests.inference.conftest import deploy, make_trained_model, random_images

    deployment = deploy(make_trained_model(project))
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/deployments/{deployment.name}/monitor")
    page.wait_for_selector("#rates-chart .empty-chart")
    assert "Nothing served in this window yet" in page.inner_text("#rates-chart")
    assert "send episode_ids" in page.inner_text("#steps-chart")
    assert page.locator("#rates-chart canvas, #steps-chart canvas").count() == 0
    assert page.inner_text("#ood-total") == "no frames checked"

    with ThreadPoolExecutor(1) as thread:  # not beside Playwright's event loop, which runs in this thread
        config = thread.submit(async_to_sync(deployment_config), deployment.name).result()
    payload, now = dump_npy(random_images(4)), time.time()
    for t in range(3):  # one RL run: the model says success on frames the env calls fail
        monitor_submit(ServedBatch(config, payload, [0.9, 0.8, 0.2, 0.1], [False] * 4, ["e1"] * 4, "a1", now + t))
    # a covered camera: the model flags 3 of these 4 frames as unlike its training frames
    ood: list[bool | None] = [True, True, True, False]
    monitor_submit(ServedBatch(config, payload, [0.9] * 4, [False] * 4, ["e2"] * 4, "a1", now + 3, ood))
    monitor_flush()
    page.reload()
    page.wait_for_selector("#rates-chart canvas")
    assert page.locator("#steps-chart canvas").count() == 1
    assert page.locator(".empty-chart").count() == 0  # the served probabilities' histogram is drawn too
    assert page.inner_text("#ood-total") == "3 of 4 frames flagged off-distribution (75.0%)"
    assert page.locator("#ood-chart canvas").count() == 1
    page.close()
