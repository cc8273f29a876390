"""Labeling from the ranked queue in a real browser: "Label next" on the project page, a keyboard label,
`n` to the next queued frame, and the ranking updated after retraining (a second model)."""

from __future__ import annotations

import os
import re

import pytest

from labeling.models import FrameLabel, Membership
from tests.conftest import login
from tests.inference.conftest import make_trained_model
from tests.training.conftest import seed_episodes

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
PASSWORD = "pw-queue-123"


def wait_saved(page) -> None:
    page.wait_for_function(
        "() => { const s = document.getElementById('save-status'); return s && s.dataset.state === 'idle' }"
    )


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_label_from_the_queue_with_the_keyboard_and_see_the_ranking_update(
    browser, live_server_url, project, django_user_model
):
    from training.label_queue import label_queue_items, label_queue_recompute

    queuer = django_user_model.objects.create_user("queuer", password=PASSWORD)
    Membership.objects.create(project=project, user=queuer, role=Membership.Role.ANNOTATOR)  # labels, sees queue
    episodes = seed_episodes(project, episodes=2, steps=5, windows=False)
    FrameLabel.objects.filter(episode__in=episodes).delete()
    make_trained_model(project, seed=1)
    label_queue_recompute(project=project)
    first, second = list(label_queue_items(project=project, limit=2))

    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.set_default_timeout(120_000)  # a loaded machine
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, live_server_url, "queuer", PASSWORD)
    page.goto(f"{live_server_url}/projects/{project.pk}/")
    page.click("text=Label next")
    page.wait_for_url(re.compile(rf"/episodes/{first.step.episode.uuid}/label/\?step={first.step.index}&queue="))
    page.wait_for_selector("body[data-ready='1']")
    page.keyboard.press("c")  # success on the queued frame
    wait_saved(page)
    page.keyboard.press("n")  # the next most valuable frame
    page.wait_for_url(re.compile(rf"/episodes/{second.step.episode.uuid}/label/\?step={second.step.index}&queue="))
    label = FrameLabel.objects.get(step=first.step, source="human")  # beside the page's env proposals
    assert label.value == "success"

    page.goto(f"{live_server_url}/projects/{project.pk}/label-queue")
    assert "models disagree" not in page.inner_text("#queue")
    make_trained_model(project, seed=2, bias=4.0)  # retraining gave a second, different model
    label_queue_recompute(project=project)
    page.reload()
    text = page.inner_text("#queue")
    assert "models disagree" in text
    rows = page.locator("#queue tbody tr")
    assert rows.count() == 9  # the labeled frame left the queue
    assert errors == []
