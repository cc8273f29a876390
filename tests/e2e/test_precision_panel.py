"""The evaluation page's inference-precision panel in a browser: bf16 against fp32 measured on this CPU, its flipped
decisions recounted as the threshold slider moves, and fp16 refused here with the reason."""

from __future__ import annotations

import os

import pytest

from tests.conftest import login
from tests.e2e.test_evaluation_first_open import trained_model
from training.evaluation.metrics import precision_difference

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_panel_recounts_flipped_decisions_as_the_threshold_moves(browser, live_server_url, project):
    model = trained_model(project)

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
