"""Served-frames gallery: sampled frames with their probabilities, split by judgement, one click to label."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from django.db import connections

from reward_client import RewardClient

from .conftest import deploy, direct_probabilities, make_trained_model, random_images

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread


def _wait_for_rows(queryset, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while queryset.count() < n and time.monotonic() < deadline:
        time.sleep(0.1)


def test_sampled_frames_show_in_the_gallery_and_label_into_the_project(
    project, user_client, live_server_url, inference_worker_process
):
    from inference.models import ServedFrame
    from labeling.models import Episode, FrameLabel
    from projects.services import agent_create

    token = agent_create(name="rl-gallery", kind="rl_worker", all_projects=True)[1]
    model = make_trained_model(project, seed=11)
    images = random_images(6, seed=5)
    p = direct_probabilities(model.checkpoint_path, images)
    threshold = float(np.median(p))  # half judged success, half fail
    deployment = deploy(model, sample_every=2, threshold=threshold)

    RewardClient(live_server_url, token, deployment.name).compute_rewards(images)
    frames = ServedFrame.objects.filter(deployment=deployment)
    _wait_for_rows(frames, 3)
    assert sorted(f.probability for f in frames) == pytest.approx(sorted(p[[0, 2, 4]].tolist()), abs=1e-5)
    for frame in frames:
        assert frame.success == (frame.probability > threshold)

    page = user_client.get(f"/deployments/{deployment.name}/gallery")
    assert page.status_code == 200
    html = page.content.decode()
    success_part, fail_part = html.split('id="judged-fail"')
    assert f">v{frames.first().model_version}<" not in html  # the version stamp is a tooltip, not the tile's text
    for frame in frames:
        assert (f'data-frame="{frame.pk}"' in success_part) == frame.success
        assert (f'data-frame="{frame.pk}"' in fail_part) == (not frame.success)

    frame = frames.first()
    response = user_client.post(f"/deployments/{deployment.name}/gallery/{frame.pk}/label", {"value": "fail"})
    assert response.status_code == 302
    frame.refresh_from_db()
    episode = Episode.objects.get(pk=frame.labeled_episode_id)
    assert episode.project == project and episode.source == "import" and episode.num_steps == 1
    label = FrameLabel.objects.get(episode=episode, source="human")
    assert label.value == "fail"
    stored = episode.steps.get().frames.get()
    from common.images.checks import decode_rgb

    index = int(np.argmin([abs(p_i - frame.probability) for p_i in p]))
    np.testing.assert_array_equal(decode_rgb(stored.image.read()), images[index])
    # labeling the same frame again adds no second episode
    user_client.post(f"/deployments/{deployment.name}/gallery/{frame.pk}/label", {"value": "fail"})
    assert Episode.objects.filter(metadata__served_frame=frame.pk).count() == 1
    assert "labeled fail" in user_client.get(f"/deployments/{deployment.name}/gallery").content.decode()


def test_deployments_page_lists_deployments_and_workers(project, user_client, inference_worker_process):
    model = make_trained_model(project, seed=12)
    deployment = deploy(model)
    time.sleep(1.5)  # a worker heartbeat
    html = user_client.get("/deployments/").content.decode()
    assert deployment.name in html
    assert "No inference worker is running" not in html


@pytest.mark.e2e
def test_one_click_in_the_browser_labels_a_served_frame(project, user, live_server_url, browser, screenshot_dir):
    from inference.services import served_frame_create
    from labeling.models import FrameLabel
    from tests.conftest import login

    model = make_trained_model(project, seed=13)
    deployment = deploy(model, sample_every=1, threshold=0.5)
    images = random_images(4, seed=13)
    frames = [
        served_frame_create(deployment_id=deployment.pk, image=img, probability=p, success=p > 0.5, model_version=1)
        for img, p in zip(images, [0.9, 0.8, 0.2, 0.1], strict=True)
    ]
    page = browser.new_page()
    try:
        login(page, live_server_url, "alice", "pw-alice-123")
        page.goto(f"{live_server_url}/deployments/{deployment.name}/gallery")
        assert page.locator("#judged-success .thumb").count() == 2
        assert page.locator("#judged-fail .thumb").count() == 2
        page.wait_for_function("[...document.images].every(img => img.complete && img.naturalWidth > 0)")
        page.screenshot(path=str(screenshot_dir / "served_frames_gallery.png"), full_page=True)
        page.click(f'.thumb[data-frame="{frames[2].pk}"] button[value="success"]')
        page.wait_for_selector(f'.thumb[data-frame="{frames[2].pk}"] .badge.success')
        assert "added to PickCube" in page.content()
    finally:
        page.close()
    label = FrameLabel.objects.get(source="human", episode__metadata__served_frame=frames[2].pk)
    assert label.value == "success" and label.project == project
    # With Playwright's loop running, this thread's queries used a connection of their own: close it.
    connections.close_all()
