"""A deployment managed from the app in a real browser, served by a real web server and inference worker: switched
to a second model on its page (v1 -> v2) its rewards, asked over REST, change; paused, clients get 503 saying so;
deleted after typing its name, clients get 404; the history says who did each."""

from __future__ import annotations

import io
import json
import os
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from tests.conftest import login

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread


def _rewards(base: str, token: str, name: str, images: np.ndarray) -> tuple[int, dict]:
    buffer = io.BytesIO()
    np.save(buffer, images)
    request = urllib.request.Request(
        f"{base}/api/deployments/{name}/rewards",
        data=buffer.getvalue(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-npy"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _until(ask, done, timeout: float = 30.0):
    """Ask until the answer is `done` (the web server's settings cache refreshes within seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = ask()
        if done(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_deployment_switched_paused_and_deleted_from_its_page(
    browser, live_server_url, inference_worker_process, project
):
    from inference.models import DeploymentEvent
    from inference.services import deployment_create
    from projects.services import agent_create
    from tests.inference.conftest import make_trained_model, random_images

    low, high = make_trained_model(project, seed=1, bias=-8.0), make_trained_model(project, seed=1, bias=8.0)
    deployment_create(name="pick-cube", trained_model=low, reward_type="soft")
    token = agent_create(name="rl-manage", kind="rl_worker", scopes=["rewards"], all_projects=True)[1]
    images = random_images(4, seed=5)

    def ask():
        return _rewards(live_server_url, token, "pick-cube", images)

    status, before = _until(ask, lambda a: a[0] == 200, timeout=90)  # the worker loads the first model
    assert status == 200, before
    assert before["version"] and max(i["probability"] for i in before["items"]) < 0.1

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/deployments/")
    page.click("a[href='/deployments/pick-cube/']")
    assert page.inner_text("#deployment-version") == "v1"
    page.select_option("#switch-model", str(high.pk))
    page.click("#deployment-switch button[type=submit]")
    page.wait_for_selector("text=now serves")
    assert page.inner_text("#deployment-version") == "v2"
    assert high.name in page.inner_text("#deployment-model")

    status, after = _until(ask, lambda a: a[0] == 200 and min(i["probability"] for i in a[1]["items"]) > 0.9, 90)
    assert status == 200 and min(i["probability"] for i in after["items"]) > 0.9, after  # the new model answers
    assert all(i["reward"] > 0.9 for i in after["items"]) and after["version"] > before["version"]

    page.click("#pause-button")
    page.wait_for_selector("#deployment-paused")
    status, paused = _until(ask, lambda a: a[0] == 503)
    assert status == 503 and "is paused" in paused["detail"], paused
    page.click("#resume-button")
    page.wait_for_selector("#pause-button")
    assert _until(ask, lambda a: a[0] == 200)[0] == 200

    page.click("#delete-link")
    page.wait_for_selector("#delete-confirm")
    page.fill("#confirm-name", "pick")
    page.click("#confirm-delete")
    assert "Type the deployment's name" in page.inner_text("#delete-confirm")  # not deleted on a wrong name
    page.fill("#confirm-name", "pick-cube")
    page.click("#confirm-delete")
    page.wait_for_url(f"{live_server_url}/deployments/")
    assert "Deployment pick-cube deleted" in page.inner_text("body")
    status, gone = _until(ask, lambda a: a[0] == 404)
    assert status == 404, gone
    page.close()

    history = list(DeploymentEvent.objects.filter(deployment_name="pick-cube").order_by("pk"))
    assert [e.action for e in history] == ["created", "switched", "paused", "resumed", "deleted"]
    assert {e.actor for e in history[1:]} == {"alice"}
