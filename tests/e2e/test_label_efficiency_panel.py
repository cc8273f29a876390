"""The evaluation page's label-efficiency panel in a browser: both orders' labels needed, and how many seeds
reached the target (the labels needed are a mean over those seeds only)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import login
from tests.training.test_label_efficiency import RESULT

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_panel_says_how_many_seeds_reached_the_target(browser, live_server_url, project):
    from training.models import TrainedModel
    from training.queue.efficiency import label_efficiency_store

    model = TrainedModel.objects.create(project=project, kind="resnet", name="m", checkpoint_path="none", config={})
    label_efficiency_store(project=project, result=RESULT, command="bench/active.py --seeds 2")
    page = browser.new_page()
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/projects/{project.pk}/compare?a={model.pk}&b={model.pk}")
    panel = page.locator("[data-testid=label-efficiency]")
    panel.wait_for()
    # RESULT: both ranked seeds reach the target (16 and 24 labels), one random seed never does
    assert panel.locator("[data-needed=ranked]").inner_text() == "20 labels"
    assert panel.locator("[data-reached=ranked]").inner_text() == "2 of 2 seeds reached it"
    assert panel.locator("[data-needed=random]").inner_text() == "24 labels"
    assert panel.locator("[data-reached=random]").inner_text() == "1 of 2 seeds reached it"
    page.close()
