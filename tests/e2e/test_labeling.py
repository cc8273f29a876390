"""Labeling in a real browser: keyboard-only frame and window labels, held keys during playback,
undo/redo, bulk proposal acceptance, and every label still there after a reload."""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path

import pytest

from labeling.models import FrameLabel, LabelChange, WindowLabel
from tests.conftest import login
from tests.labeling.factories import episode_with_frames

# Playwright's sync API keeps an event loop in this thread; Django's ORM calls from the test are still sync.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"
PASSWORD = "pw-labeler-123"


@pytest.fixture(scope="session", autouse=True)
def built_frontend():
    """Builds the front end once when the bundle is missing or older than its sources."""
    bundle = FRONTEND / "dist" / "pages" / "labeling.js"
    sources = [p for p in (FRONTEND / "src").rglob("*") if p.is_file()]
    if not bundle.exists() or any(p.stat().st_mtime > bundle.stat().st_mtime for p in sources):
        subprocess.run(["npm", "run", "build"], cwd=FRONTEND, check=True, capture_output=True)


def human_frames(episode) -> dict[int, str]:
    return dict(FrameLabel.objects.filter(episode=episode, source="human").values_list("step__index", "value"))


def human_windows(episode) -> set[tuple[int, int, str]]:
    return set(WindowLabel.objects.filter(episode=episode, source="human").values_list("start", "end", "value"))


def wait_saved(page) -> None:
    page.wait_for_function(
        "() => { const s = document.getElementById('save-status'); return s && s.dataset.state === 'idle' }"
    )
    page.wait_for_timeout(50)


def cursor(page) -> int:
    return page.evaluate("() => window.__rs.state.cursor")


@pytest.fixture
def labeler(django_user_model, project):
    person = django_user_model.objects.create_user("labeler", password=PASSWORD)
    project.memberships.create(user=person, role="reviewer")  # labels and decides proposals
    return person


def _open_the_episode(page, live_server_url: str, project, episode) -> None:
    """Logged in, from the project page to the episode's labeling page, once its proposals are generated (on
    first open, apart from human labels)."""
    login(page, live_server_url, "labeler", PASSWORD)
    page.goto(f"{live_server_url}/projects/{project.pk}/")
    page.click(f"a[href='/episodes/{episode.uuid}/label/']")
    page.wait_for_selector("body[data-ready='1']")
    # proposals are generated on first open, apart from human labels
    page.wait_for_function("() => window.__rs.model.proposal[199] === 'success'")
    assert FrameLabel.objects.filter(episode=episode, source="proposal").count() == 200


def _frame_labels_with_undo_and_redo(page, episode) -> dict[int, str]:
    """Frame labels, one key each, auto-advance on with `t`, a selection, a clear, undo and redo; returns the
    human frame labels then."""
    kb = page.keyboard
    kb.press("c")  # step 0 success
    kb.press("t")
    kb.press("ArrowRight")  # 1
    kb.press("a")  # step 1 fail, advances to 2
    assert cursor(page) == 2
    kb.press("Shift+ArrowRight")  # hop 10 selecting 2..12
    assert cursor(page) == 12
    kb.press("c")  # the whole selection is success
    kb.press("Escape")
    kb.press("ArrowLeft")  # 11
    kb.press("x")  # clears 11, advances to 12
    wait_saved(page)
    expected = {0: "success", 1: "fail", **{i: "success" for i in range(2, 13) if i != 11}}
    assert human_frames(episode) == expected
    kb.press("z")  # undo the clear: 11 is success again
    wait_saved(page)
    assert human_frames(episode)[11] == "success"
    kb.press("Shift+Z")  # redo: cleared again
    wait_saved(page)
    assert human_frames(episode) == expected
    return expected


def _shift_click_a_range(page, episode, expected: dict[int, str]) -> None:
    """Shift-click on the timeline selects a range; one key labels it all."""
    kb = page.keyboard
    box = page.locator("#timeline").bounding_box()
    step_x = lambda step: box["x"] + (step + 0.5) * box["width"] / 200  # noqa: E731
    page.mouse.click(step_x(20), box["y"] + 30)
    page.keyboard.down("Shift")
    page.mouse.click(step_x(25), box["y"] + 30)
    page.keyboard.up("Shift")
    kb.press("a")
    wait_saved(page)
    expected.update({i: "fail" for i in range(20, 26)})
    assert human_frames(episode) == expected
    kb.press("Escape")


def _window_labels_with_undo_and_redo(page, episode) -> None:
    """Window labels: the window starts at the cursor; `1` positive (auto-advance by the stride)."""
    kb = page.keyboard
    kb.press("Home")
    kb.press("1")  # 0..4 positive, cursor -> 1
    kb.press("]")  # 2
    kb.press("2")  # 2..6 negative, cursor -> 3
    kb.press("3")  # 3..7 unclear
    kb.press("z")  # undo the unclear
    kb.press("Shift+Z")  # redo it
    kb.press("z")  # and undo again
    wait_saved(page)
    assert human_windows(episode) == {(0, 4, "positive"), (2, 6, "negative")}


def _hold_a_while_playing(page, episode) -> None:
    """The terminal habit: hold `a` while playing; every frame passed is labeled fail."""
    kb = page.keyboard
    kb.press("t")  # auto-advance off
    page.evaluate("() => { window.__rs.state.fps = 30 }")
    kb.press("End")
    for _ in range(40):
        kb.press("ArrowLeft")  # step 159
    start = cursor(page)
    kb.press("Space")
    kb.down("a")
    page.wait_for_function(f"() => window.__rs.state.cursor >= {start + 8}")
    kb.up("a")
    kb.press("Space")
    wait_saved(page)
    held = {i: v for i, v in human_frames(episode).items() if i >= start}
    assert len(held) >= 8 and set(held.values()) == {"fail"}
    assert sorted(held) == list(range(start, start + len(held)))  # contiguous: no frame skipped


def _help_and_history(page, screenshot_dir) -> None:
    """`?` shows the shortcuts (opened at its top); `h` shows who changed what."""
    kb = page.keyboard
    kb.press("?")
    assert page.locator("dialog#help").is_visible()
    # it opens at its top (focus on the title, not on the Close button at the bottom)
    assert page.evaluate("() => document.getElementById('help').scrollTop") == 0
    assert page.evaluate("() => document.activeElement.id") == "help-title"
    page.screenshot(path=str(screenshot_dir / "labeling-help.png"))
    kb.press("Escape")

    # the history shows who changed what
    kb.press("h")
    page.wait_for_selector("#history-rows tr")
    assert "labeler" in page.inner_text("#history-rows")


def _check_every_label_after_a_reload(page, episode, screenshot_dir) -> None:
    """Reload: every frame and window label is still shown."""
    before_frames, before_windows = human_frames(episode), human_windows(episode)
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    shown = page.evaluate("() => window.__rs.model.human")
    assert {i: v for i, v in enumerate(shown) if v} == before_frames
    shown_windows = page.evaluate(
        "() => window.__rs.model.windows.filter(w => w.source === 'human').map(w => [w.start, w.end, w.value])"
    )
    assert {tuple(w) for w in shown_windows} == before_windows
    page.keyboard.press("Home")
    page.screenshot(path=str(screenshot_dir / "labeling-episode.png"), full_page=True)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_keyboard_labeling_survives_a_reload(browser, live_server_url, labeler, project, screenshot_dir):
    rewards = [round(0.5 + 0.5 * math.sin(2 * math.pi * i / 60), 4) for i in range(200)]  # rises and falls
    episode = episode_with_frames(project=project, num_steps=200, size=64, success_from=170, rewards=rewards)
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    _open_the_episode(page, live_server_url, project, episode)

    expected = _frame_labels_with_undo_and_redo(page, episode)
    _shift_click_a_range(page, episode, expected)
    _window_labels_with_undo_and_redo(page, episode)
    _hold_a_while_playing(page, episode)
    _help_and_history(page, screenshot_dir)
    _check_every_label_after_a_reload(page, episode, screenshot_dir)
    assert LabelChange.objects.filter(episode=episode, author=labeler).exists()
    assert errors == []


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_proposals_accepted_in_bulk_from_the_keyboard_and_the_project_page(
    browser, live_server_url, celery_worker_process, labeler, project, screenshot_dir
):
    first = episode_with_frames(project=project, num_steps=60, size=32, success_from=50)
    second = episode_with_frames(project=project, num_steps=40, size=32, success_from=30)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, live_server_url, "labeler", PASSWORD)

    page.goto(f"{live_server_url}/projects/{project.pk}/")
    page.click("button[data-action=generate]")  # a background job: its page follows it to the counts
    page.wait_for_url(re.compile(r".*/projects/\d+/proposals/\d+/$"))
    page.wait_for_selector("#proposal-progress[data-status=succeeded]", timeout=30_000)
    assert page.locator("#summary-episodes").inner_text() == "2"
    page.goto(f"{live_server_url}/episodes/{first.uuid}/label/")
    page.wait_for_selector("body[data-ready='1']")
    kb = page.keyboard
    kb.press("p")  # next run of open proposals: where the env success flag turns on (50)
    kb.press("p")  # no run after it: the cursor stays
    assert cursor(page) == 50
    kb.press("r")  # reject the proposals here (step 50 and window 50..54)
    kb.press("Shift+Y")  # accept everything else still open in the episode
    page.wait_for_function("() => window.__rs.model.proposalStatus.every((s, i) => s !== 'open')")
    wait_saved(page)
    frames = human_frames(first)
    assert len(frames) == 59 and 50 not in frames
    assert frames[0] == "fail" and frames[59] == "success"
    assert (50, 54) not in {(s, e) for s, e, _ in human_windows(first)}
    assert len(human_windows(first)) == 55  # 56 windows, one rejected
    page.screenshot(path=str(screenshot_dir / "labeling-proposals-accepted.png"), full_page=True)

    # the project page accepts every episode's proposals at once, after asking with the count
    asked: list[str] = []
    page.on(
        "dialog",
        lambda dialog: (asked.append(dialog.message), dialog.dismiss() if len(asked) == 1 else dialog.accept()),
    )
    page.goto(f"{live_server_url}/projects/{project.pk}/")
    page.click("button[data-action=accept][data-kind=frame]")  # dismissed: nothing is written
    assert page.inner_text("#proposal-status") == ""  # evaluated once the dialog was answered
    assert asked == ["Accept all 40 open frame proposals? Each becomes a frame label in this project."]
    assert human_frames(second) == {}
    page.click("button[data-action=accept][data-kind=frame]")
    page.wait_for_selector("#proposal-status[data-done=accept]")
    assert len(human_frames(second)) == 40
    page.wait_for_load_state("load")
    page.goto(f"{live_server_url}/projects/{project.pk}/")
    content = page.content()
    assert "80/150" in content  # fail frames: 50 (first episode) + 30 (second)
    assert "19/50" in content  # success frames: 9 (step 50 was rejected) + 10
    page.screenshot(path=str(screenshot_dir / "labeling-project.png"), full_page=True)
    assert errors == []


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_failed_save_is_shown_and_the_page_resyncs(browser, live_server_url, labeler, project):
    episode = episode_with_frames(project=project, num_steps=20, size=32)
    page = browser.new_page()
    login(page, live_server_url, "labeler", PASSWORD)
    page.goto(f"{live_server_url}/episodes/{episode.uuid}/label/")
    page.wait_for_selector("body[data-ready='1']")
    wait_saved(page)  # proposals generated on first open

    def refuse(route):
        route.fulfill(status=503, content_type="application/json", body='{"detail": "database is down"}')

    page.route("**/frame-labels", refuse)
    page.keyboard.press("c")
    page.wait_for_selector("#save-status[data-state=error]")
    assert "database is down" in page.inner_text("#save-status")
    # the page resyncs with the server: the label that was not saved is not shown as saved
    page.wait_for_function("() => window.__rs.model.human[0] === null")
    page.unroute("**/frame-labels")
    page.keyboard.press("a")
    wait_saved(page)
    assert page.inner_text("#save-status") == "Saved"
    assert human_frames(episode) == {0: "fail"}
