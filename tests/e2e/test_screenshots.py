"""Screenshots of every page at 1400 px and 390 px, light and dark (artifacts/screenshots/, not committed; the test
prints the folder), the API docs, the login page and its lock-out page included,
with the two things a look would check asserted for every page: no horizontal page scroll on a phone, and a
dark page behind a dark-mode browser."""

from __future__ import annotations

import os
import re
from unittest import mock

import pytest

from tests.conftest import login
from tests.training.conftest import seed_episodes

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread
TINY = {"hidden_dim": 8, "image_size": [3, 32, 32], "batch_size": 8, "epochs": 1, "patience": 0, "seed": 0,
        "num_threads": 1, "pretrained": False, "warmup_steps": 0}  # fmt: skip
WIDTHS = {"wide": 1400, "phone": 390}
PAGE_BACKGROUND = "getComputedStyle(document.body).backgroundColor"
PAGE_OVERFLOW = "document.scrollingElement.scrollWidth - innerWidth"
BROKEN_IMAGES = (
    "[...document.images].filter(i => i.complete && !i.naturalWidth && i.getClientRects().length"
    " && getComputedStyle(i).visibility !== 'hidden').map(i => i.alt || i.src)"
)
LIGHT_ONLY = {"api_docs", "api_redoc"}  # Swagger UI's and Redoc's own pages: they have one (light) theme


@pytest.fixture
def main_pages(project) -> dict[str, str]:
    """One of each thing the main pages show; the pages' paths by name. (Seeded before the browser starts:
    the training job pushes its events with async_to_sync, which refuses to run beside Playwright's loop.)"""
    from inference.models import Deployment, ServedFrame
    from inference.teleop.models import TeleopSession
    from labeling.models import Frame, FrameLabel
    from projects.models import Agent
    from training.models import TrainedModel
    from training.queue.services import label_queue_recompute
    from training.services import job_create, job_execute
    from training.snapshots.services import snapshot_build, snapshot_create

    with mock.patch("labeling.ingest.services._queue_proposals"):  # no proposal tasks for a worker that is not there
        episodes = seed_episodes(project, episodes=6, steps=8)
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "trend": False})
    snapshot_build(snapshot_id=snapshot.pk)
    job = job_create(project=project, snapshot=snapshot, config=TINY, enqueue=False)
    job_execute(job_id=job.pk)
    model = TrainedModel.objects.get(job=job)
    FrameLabel.objects.filter(episode=episodes[-1]).delete()  # frames for the label queue
    label_queue_recompute(project=project)
    deployment = Deployment.objects.create(name="screens", trained_model=model, project=project)
    agent = Agent.objects.create(name="screens-robot")
    teleop = TeleopSession.objects.create(
        agent=agent, project=project, deployment_name=deployment.name, robot="maniskill", env_id="PickCube-v1"
    )
    images = Frame.objects.filter(step__episode=episodes[0]).order_by("step__index")
    ServedFrame.objects.bulk_create(
        ServedFrame(
            deployment=deployment,
            image=frame.image.name,
            probability=round(0.1 + 0.1 * i, 3),
            success=i % 2 == 0,
            env_success=i % 3 == 0,
            run=f"agent-1/run-{i % 2}",
            episode_step=i,
        )
        for i, frame in enumerate(images[:6])
    )
    return {
        "home": "/",
        "project": f"/projects/{project.pk}/",
        "labeling": f"/episodes/{episodes[0].uuid}/label/",
        "training": f"/projects/{project.pk}/training/",
        "runs": f"/projects/{project.pk}/runs/",
        "job": f"/jobs/{job.pk}/",
        "evaluation": f"/models/{model.pk}/evaluation",
        "deployments": "/deployments/",
        "gallery": f"/deployments/{deployment.name}/gallery",
        "monitor": f"/deployments/{deployment.name}/monitor",
        "deployment": f"/deployments/{deployment.name}/",
        "deployment_delete": f"/deployments/{deployment.name}/delete",
        "label_queue": f"/projects/{project.pk}/label-queue",
        "snapshot": f"/snapshots/{snapshot.pk}/",
        "project_new": "/projects/new/",
        "import": f"/projects/{project.pk}/import/",
        "compare": f"/projects/{project.pk}/compare?a={model.pk}&b={model.pk}",
        "deploy": f"/models/{model.pk}/deploy",
        "teleop": "/teleop/",
        "teleop_dashboard": f"/teleop/{teleop.pk}/",
        "api_docs": "/api/docs/",
        "api_redoc": "/api/redoc/",
    }


def is_dark(css_colour: str) -> bool:
    """An `rgb(r, g, b)` colour whose relative luminance is under 0.2."""
    red, green, blue = (int(v) / 255 for v in re.findall(r"\d+", css_colour)[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue < 0.2


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(900)
def test_every_main_page_fits_a_phone_and_goes_dark_with_the_browser(
    live_server_url, main_pages, browser, screenshot_dir, capsys
):
    paths = main_pages
    problems: list[str] = []
    for scheme in ("light", "dark"):
        for size, width in WIDTHS.items():
            context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
            page = context.new_page()
            page.set_default_timeout(60_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
            login(page, live_server_url, "alice", "pw-alice-123")
            for name, path in paths.items():
                where = f"{name} ({scheme}, {width} px)"
                response = page.goto(f"{live_server_url}{path}", wait_until="networkidle")
                assert response is not None and response.status == 200, f"{where}: {response and response.status}"
                if name == "labeling":
                    page.wait_for_selector("body[data-ready='1']")
                page.screenshot(path=screenshot_dir / f"{name}-{size}-{scheme}.png", full_page=True)
                if width < 600 and (overflow := page.evaluate(PAGE_OVERFLOW)) > 1:
                    problems.append(f"{where}: the page scrolls sideways by {overflow} px")
                if (
                    scheme == "dark"
                    and name not in LIGHT_ONLY
                    and not is_dark(background := page.evaluate(PAGE_BACKGROUND))
                ):
                    problems.append(f"{where}: the page background is {background}")
                problems += [f"{where}: broken image {image}" for image in page.evaluate(BROKEN_IMAGES)]
                problems += [f"{where}: script error {error}" for error in errors]
                errors.clear()
            context.close()
    problems += logged_out_pages(browser, live_server_url, screenshot_dir)
    with capsys.disabled():  # shown without -s
        print(f"\nscreenshots of {len(paths) + 2} pages x 2 widths x 2 schemes: {screenshot_dir}")
    assert not problems, "\n".join(problems)


def logged_out_pages(browser, live_server_url: str, screenshot_dir) -> list[str]:
    """The login page, then the lock-out page (after too many wrong passwords), at each width and scheme; run
    last, since the lock-out holds for the rest of the test."""
    from django.conf import settings

    problems: list[str] = []
    for scheme in ("light", "dark"):
        for size, width in WIDTHS.items():
            context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
            page = context.new_page()

            def look(name: str, page=page, size=size, scheme=scheme, width=width) -> None:
                where = f"{name} ({scheme}, {width} px)"
                page.screenshot(path=screenshot_dir / f"{name}-{size}-{scheme}.png", full_page=True)
                if width < 600 and (overflow := page.evaluate(PAGE_OVERFLOW)) > 1:
                    problems.append(f"{where}: the page scrolls sideways by {overflow} px")
                if scheme == "dark" and not is_dark(background := page.evaluate(PAGE_BACKGROUND)):
                    problems.append(f"{where}: the page background is {background}")

            page.goto(f"{live_server_url}/accounts/login/")
            look("login")
            for _ in range(settings.AXES_FAILURE_LIMIT):
                if page.locator("#locked-out").count():
                    break
                page.fill("input[name=username]", "alice")
                page.fill("input[name=password]", "not her password")
                page.click("button[type=submit]")
            page.wait_for_selector("#locked-out h1")
            look("login_locked_out")
            context.close()
    return problems


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_labeling_page_names_its_controls_and_announces_the_step(live_server_url, project, browser):
    from playwright.sync_api import expect

    with mock.patch("labeling.ingest.services._queue_proposals"):
        (episode,) = seed_episodes(project, episodes=1, steps=4, windows=False)
    page = browser.new_page()
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/episodes/{episode.uuid}/label/")
    page.wait_for_selector("body[data-ready='1']")
    unnamed = page.eval_on_selector_all(
        "#labeler button, #help-button, #timeline, #views canvas",
        "els => els.filter(e => !(e.getAttribute('aria-label') || '').trim()).map(e => e.outerHTML)",
    )
    assert not unnamed, unnamed
    announcer = page.locator("[aria-live=polite]#announcer")
    expect(announcer).to_have_text(re.compile(r"Step 0, 1 of 4\. Label fail\."))  # said once the page settled
    page.keyboard.press("ArrowRight")
    expect(announcer).to_have_text(re.compile(r"Step 1, 2 of 4\. Label fail\."))
    assert page.get_attribute("#timeline", "aria-valuenow") == "1"
    page.keyboard.press("c")  # success on step 1: the new label is said
    expect(announcer).to_have_text(re.compile(r"Step 1, 2 of 4\. Label success\."))
    assert announcer.count() == 1
    assert page.get_by_role("button", name="Label fail").get_attribute("aria-keyshortcuts") == "a"
    page.close()


def test_the_darkness_check_tells_dark_from_light_backgrounds():
    assert is_dark("rgb(18, 21, 28)") and not is_dark("rgb(246, 247, 249)") and not is_dark("rgb(255, 255, 255)")
