"""End to end: server + inference worker + replay agent + the dashboard in headless Chromium."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from inference.teleop.models import TeleopSession
from labeling.models import Episode
from tests.conftest import ROOT, login
from tests.inference.conftest import deploy, make_trained_model

# Playwright's sync API runs an event loop in this thread; the ORM calls here are plain sync test code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def start_agent(process_env, url: str, token: str, deployment: str, *extra: str) -> subprocess.Popen:
    args = [
        sys.executable, "-m", "robot_agent", "replay", "--server", url, "--token", token, "--project", "PickCube",
        "--deployment", deployment, "--hz", "10", "--format", "png", *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        args, cwd=ROOT, env=process_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.usefixtures("inference_worker_process")
def test_dashboard_shows_live_probabilities_from_the_replay_agent(
    live_server_url, browser, screenshot_dir, process_env, user, project, agent_token
):
    deployment = deploy(make_trained_model(project), threshold=0.5)
    page = browser.new_page(viewport={"width": 1300, "height": 1100})
    login(page, live_server_url, "alice", "pw-alice-123")
    agent = start_agent(
        process_env, live_server_url, agent_token[1], deployment.name, "--episodes", "2", "--synthetic-steps", "80"
    )
    try:
        session = wait_for(lambda: TeleopSession.objects.filter(is_live=True).first(), what="a live session")
        page.goto(f"{live_server_url}/teleop/{session.pk}/")
        page.wait_for_function("Number(document.body.dataset.results || 0) >= 5", timeout=30_000)
        page.wait_for_function("document.querySelector('img[data-camera=main]').src.startsWith('data:image/png')")
        probability = float(page.inner_text("#prob"))
        assert 0.0 <= probability <= 1.0
        assert page.inner_text("#conn") == "connected"
        assert page.inner_text("#e2e").endswith("ms")
        page.wait_for_function("Number(document.body.dataset.results) >= 20", timeout=30_000)  # a fuller chart
        # the step rate follows the agent's 10 Hz (it used to read 0.0 Hz while steps streamed)
        page.wait_for_function("Number(document.getElementById('rate').dataset.hz || 0) > 0", timeout=10_000)
        hz = float(page.get_attribute("#rate", "data-hz"))
        assert 3.0 < hz < 13.0, hz
        # optional smoothing: a second line, the moving average of p(success)
        assert page.evaluate("document.body.dataset.smoothing") == "off"
        page.check("#smooth")
        assert page.evaluate("document.body.dataset.smoothing") == "on"
        assert 0.0 <= page.evaluate("window.__teleop.smoothed") <= 1.0
        page.screenshot(path=str(screenshot_dir / "teleop_dashboard.png"), full_page=True)
        output, _ = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, output
    assert "done: 2 episodes" in output
    # the env-success overlay: each scored step's env flag from its frame; the synthetic episodes succeed in
    # their last quarter, so both values are drawn
    known, succeeded, results = page.evaluate(
        "[window.__teleop.envKnownResults, window.__teleop.envSuccessResults, window.__teleop.results]"
    )
    assert known >= 0.9 * results and 0 < succeeded < known, (known, succeeded, results)
    assert "u-off" not in (page.locator(".u-legend .u-series").nth(4).get_attribute("class") or "")
    page.uncheck("#env-overlay")
    assert "u-off" in (page.locator(".u-legend .u-series").nth(4).get_attribute("class") or "")
    wait_for(lambda: not TeleopSession.objects.get(pk=session.pk).is_live, timeout=10, what="the session to end")
    session.refresh_from_db()
    assert session.inferred_count > 0 and session.step_count == 160
    episodes = Episode.objects.filter(teleop_sessions=session)
    assert episodes.count() == 2 and all(e.num_steps == 80 for e in episodes)

    page.goto(f"{live_server_url}/teleop/")
    link = page.locator(f"tr[data-session='{session.pk}'] a.episode-link").first
    href = link.get_attribute("href")
    assert href.startswith("/episodes/") and href.endswith("/label/")
    assert page.goto(f"{live_server_url}{href}").ok  # the recorded episode opens in the labeling page
    page.close()


def test_agent_and_dashboard_reconnect_after_a_server_restart(browser, process_env, user, project, agent_token):
    from tests.conftest import _spawn, _stop, _wait_for_port, free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--port", str(port), "--log-level", "warning"]
    server = _spawn(args, process_env, f"uvicorn-restart-{port}.log")
    agent = None
    try:
        _wait_for_port(port, server)
        page = browser.new_page()
        login(page, url, "alice", "pw-alice-123")
        agent = start_agent(
            process_env, url, agent_token[1], "", "--episodes", "1", "--synthetic-steps", "400", "--hz", "20"
        )
        session = wait_for(lambda: TeleopSession.objects.filter(is_live=True).first(), what="a live session")
        page.goto(f"{url}/teleop/{session.pk}/")
        page.wait_for_function("window.__teleop && window.__teleop.frames >= 5", timeout=20_000)

        _stop(server)  # the server goes away mid-stream...
        page.wait_for_function("window.__teleop.connected === false", timeout=10_000)
        server = _spawn(args, process_env, f"uvicorn-restart-{port}-2.log")  # ...and comes back
        _wait_for_port(port, server)
        page.wait_for_function("window.__teleop.connected && window.__teleop.reconnects >= 1", timeout=20_000)
        before = page.evaluate("window.__teleop.frames")
        page.wait_for_function(f"window.__teleop.frames >= {before + 10}", timeout=20_000)
        output, _ = agent.communicate(timeout=60)
        assert agent.returncode == 0, output
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
        _stop(server)
    assert TeleopSession.objects.count() == 1  # the agent resumed its session
    episode = Episode.objects.get()
    assert episode.status == Episode.Status.FINISHED
    assert 100 < episode.num_steps <= 400  # steps sent while the server was down may be lost, not the rest
    page.close()


def test_the_live_reward_shows_the_off_distribution_flag(live_server_url, browser, user, project, agent_token):
    """A result the model flagged `ood` shows an OOD badge beside the live reward and counts it; the next frame
    in distribution hides the badge; a model without OOD statistics (ood null) says the frames are not checked.
    Results reach the page through the real channel layer and the viewer's socket."""
    from concurrent.futures import ThreadPoolExecutor

    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from inference.teleop.stream import group_name

    session = TeleopSession.objects.create(agent=agent_token[0], project=project, is_live=True)
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/teleop/{session.pk}/")
    page.wait_for_function("document.getElementById('conn').textContent === 'connected'", timeout=30_000)
    assert page.locator("#ood-flag").is_hidden()

    def send(index: int, ood: bool | None) -> None:
        result = {"type": "result", "episode": "e1", "index": index, "probability": 0.97, "success": True,
                  "reward": 1.0, "threshold": 0.5, "inference_ms": 3.0, "dropped": 0, "ood": ood}  # fmt: skip
        event = {"type": "teleop.event", "data": result}
        with ThreadPoolExecutor(1) as thread:  # not beside Playwright's event loop, which runs in this thread
            thread.submit(async_to_sync(get_channel_layer().group_send), group_name(session.pk), event).result()

    send(0, None)
    page.wait_for_function("Number(document.body.dataset.results || 0) >= 1")
    assert page.inner_text("#ood-count") == "not checked" and page.locator("#ood-flag").is_hidden()
    send(1, True)  # a covered camera: paid as the deployment's ood_action says, and flagged here
    page.wait_for_function("Number(document.body.dataset.results || 0) >= 2")
    assert page.locator("#ood-flag").is_visible() and page.inner_text("#ood-count") == "1 of 1"
    send(2, False)
    page.wait_for_function("Number(document.body.dataset.results || 0) >= 3")
    assert page.locator("#ood-flag").is_hidden() and page.inner_text("#ood-count") == "1 of 2"
    page.close()


def test_a_scored_teleop_frame_carries_the_models_ood_flag():
    """The live result the stream sends viewers carries the scored item's `ood` (FrameScore.ood)."""
    from inference.teleop.scoring import FrameScore

    assert FrameScore(0.9, True, 1.0, 0.5, 2.0, ood=True).ood is True
    assert FrameScore(0.9, True, 1.0, 0.5, 2.0).ood is None
