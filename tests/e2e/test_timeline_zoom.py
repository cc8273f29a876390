"""Timeline zoom on a long episode, in real Chromium: + and ctrl+wheel zoom in around the step or the pointer,
a click on the zoomed timeline picks a step of the zoomed range, the view follows the step when it runs off
an edge, a sideways wheel pans, and Fit shows the whole episode again."""

from __future__ import annotations

import os
import re

import pytest

from tests.conftest import login
from tests.labeling.factories import episode_with_frames

from .test_labeling import PASSWORD, built_frontend, cursor, labeler  # noqa: F401 - fixtures used by name

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
STEPS = 400


def view(page) -> tuple[int, int]:
    """The steps the timeline shows, first and last, from its text."""
    text = page.locator("#zoom-text").inner_text()
    match = re.fullmatch(rf"steps (\d+)–(\d+) of {STEPS}", text)
    assert match, text
    return int(match.group(1)), int(match.group(2))


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("labeler")
def test_zooming_the_timeline_of_a_long_episode(browser, live_server_url, project, screenshot_dir):
    episode = episode_with_frames(project=project, num_steps=STEPS, size=32)
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, live_server_url, "labeler", PASSWORD)
    page.goto(f"{live_server_url}/episodes/{episode.uuid}/label/?step=200")
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("#zoom-text").inner_text() == f"all {STEPS} steps"

    page.keyboard.press("+")
    page.keyboard.press("+")  # 400 -> 200 -> 100 steps, around the current step
    first, last = view(page)
    assert last - first + 1 == 100 and first <= 200 <= last
    box = page.locator("#timeline").bounding_box()
    page.mouse.click(box["x"] + 2, box["y"] + 30)  # the left edge is the zoomed range's first step
    assert cursor(page) == first
    page.screenshot(path=str(screenshot_dir / "labeling_timeline_zoomed.png"), full_page=True)

    page.keyboard.press("End")  # the last step: the view follows it
    first, last = view(page)
    assert (first, last) == (STEPS - 100, STEPS - 1) and cursor(page) == STEPS - 1

    page.mouse.move(box["x"] + box["width"] * 0.25, box["y"] + 30)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -100)  # zoom in at the pointer: the step under it stays under it
    page.keyboard.up("Control")
    page.wait_for_function("() => !document.getElementById('zoom-text').textContent.includes('300–')")
    first, last = view(page)
    assert last - first + 1 == 50 and first <= 325 <= last
    page.mouse.wheel(-300, 0)  # sideways: pans toward the start by a tenth of the view
    page.wait_for_function(f"() => !document.getElementById('zoom-text').textContent.startsWith('steps {first}–')")
    assert view(page)[0] == first - 5

    page.keyboard.press("-")
    assert view(page)[1] - view(page)[0] + 1 == 100
    page.click("#zoom-fit")
    assert page.locator("#zoom-text").inner_text() == f"all {STEPS} steps"
    page.mouse.click(box["x"] + box["width"] - 1, box["y"] + 30)  # unzoomed: the right edge is the last step
    assert cursor(page) == STEPS - 1
    assert errors == []
    page.close()
