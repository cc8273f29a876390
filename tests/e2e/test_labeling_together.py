"""Two people label one episode at once in two browser contexts: a stale edit is refused and explained
(the other person's value, keep mine or take theirs), and an undo never reverts the other person's change.
Neither loses an edit without being told."""

from __future__ import annotations

import os

import pytest

from labeling.models import FrameLabel
from projects.models import Membership
from tests.conftest import login
from tests.labeling.factories import episode_with_frames

from .test_labeling import built_frontend, wait_saved  # noqa: F401 - session fixture

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _open(browser, base_url, username, password, episode):
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, base_url, username, password)
    page.goto(f"{base_url}/episodes/{episode.uuid}/label/")
    page.wait_for_selector("body[data-ready='1']")
    return page, errors


def _stored(episode) -> dict[int, str]:
    return dict(FrameLabel.objects.filter(episode=episode, source="human").values_list("step__index", "value"))


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_two_people_on_one_episode_are_told_of_each_others_edits(
    browser, live_server_url, project, user, django_user_model, screenshot_dir
):
    # people see only their projects; bob overwrites alice's label, which needs the reviewer role
    bob_user = django_user_model.objects.create_user("bob", password="pw-bob-123")
    Membership.objects.create(project=project, user=bob_user, role=Membership.Role.REVIEWER)
    episode = episode_with_frames(project=project, num_steps=8, size=16)
    alice, alice_errors = _open(browser, live_server_url, "alice", "pw-alice-123", episode)
    bob, bob_errors = _open(browser, live_server_url, "bob", "pw-bob-123", episode)

    alice.keyboard.press("c")  # step 0 success
    wait_saved(alice)
    assert _stored(episode) == {0: "success"}

    bob.keyboard.press("a")  # bob still sees no label at step 0 and sets fail: refused, and he is told
    bob.wait_for_selector("#conflict:not([hidden])")
    text = bob.locator("#conflict").inner_text()
    assert "Step 0: alice set success; you set fail." in text
    assert _stored(episode) == {0: "success"}
    bob.screenshot(path=str(screenshot_dir / "labeling_conflict.png"))
    bob.click("#conflict button[data-choice=mine]")  # bob keeps his value, knowingly
    wait_saved(bob)
    assert bob.locator("#conflict").is_hidden()
    assert _stored(episode) == {0: "fail"}

    alice.keyboard.press("z")  # alice undoes her success: it would revert bob's fail, so she is asked
    alice.wait_for_selector("#conflict:not([hidden])")
    assert "Step 0: bob set fail; you set no label." in alice.locator("#conflict").inner_text()
    assert _stored(episode) == {0: "fail"}
    alice.click("#conflict button[data-choice=theirs]")
    assert alice.evaluate("() => window.__rs.model.human[0]") == "fail"  # her page now shows bob's value

    # edits of different frames do not clash
    alice.keyboard.press("ArrowRight")
    alice.keyboard.press("c")
    bob.keyboard.press("End")
    bob.keyboard.press("a")
    wait_saved(alice)
    wait_saved(bob)
    assert _stored(episode) == {0: "fail", 1: "success", 7: "fail"}
    assert alice.locator("#conflict").is_hidden() and bob.locator("#conflict").is_hidden()
    assert alice.locator("#save-status").inner_text() == "Saved" and bob.locator("#save-status").inner_text() == "Saved"
    assert not alice_errors and not bob_errors
