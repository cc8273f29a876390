"""The run command's demo project on a fresh database holds real PickCube frames: the scripted agent's
episodes (both cameras), frames labeled by the lift (the cube held up off the table), a perturbed grasp that
fails, trend-rule windows, and frames that change from step to step. A project seeded earlier with the env
flag's labels has them follow the lift, except labels someone edited."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from PIL import Image

from labeling.models import Frame, FrameLabel, WindowLabel
from projects.models import Membership, Project
from tests.conftest import login
from webapp.demo.lift import frame_labels
from webapp.demo.pickcube import DEMO_PROJECT, ENV_SUCCESS, demo_episodes, seed_demo_project, seed_pickcube_episodes

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def lift_labels(steps) -> dict[int, str]:
    heights, grasped = [s.info["cube_height"] for s in steps], [s.info["is_grasped"] for s in steps]
    return {s.index: value for s, value in zip(steps, frame_labels(heights, grasped), strict=True) if value}


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_demo_project_shows_real_pickcube_frames(browser, live_server_url, user):
    out = io.StringIO()
    project = seed_demo_project(episodes=3, size=64, stdout=out)  # the run command's seeding, fewer episodes
    Membership.objects.create(project=project, user=user, role=Membership.Role.ANNOTATOR)  # people see their projects
    assert project.name == DEMO_PROJECT, out.getvalue()  # not the placeholder: the simulator ran (or was cached)
    episodes = list(project.episodes.order_by("metadata__seed"))
    assert [e.env_id for e in episodes] == ["PickCube-v1"] * 3
    assert [e.metadata["grasp_perturbed"] for e in episodes] == [False, False, True]
    assert [e.success for e in episodes] == [True, True, False]  # the open-hand grasp never lifts the cube
    lifted = episodes[0]
    steps = list(lifted.steps.order_by("index"))
    human = dict(FrameLabel.objects.filter(episode=lifted, source="human").values_list("step__index", "value"))
    assert human == lift_labels(steps)
    assert 0 < sum(v == "success" for v in human.values()) < len(steps)
    assert WindowLabel.objects.filter(episode=lifted, source="human").exists()  # trend-rule windows accepted

    page = browser.new_page(viewport={"width": 1300, "height": 900})
    login(page, live_server_url, "alice", "pw-alice-123")
    page.goto(f"{live_server_url}/projects/{project.pk}/")
    assert page.locator("a[href$='/label/']").count() >= 3
    first_success = min(i for i, v in human.items() if v == "success")
    page.goto(f"{live_server_url}/episodes/{lifted.uuid}/label/?step={first_success}")
    page.wait_for_selector("body[data-ready='1']")
    payload = page.request.get(f"{live_server_url}/api/episodes/{lifted.uuid}/labeling").json()
    assert set(payload["frames"]) == {"main", "extra"}

    def frame(camera: str, index: int) -> np.ndarray:
        response = page.request.get(f"{live_server_url}{payload['frames'][camera][index]}")
        assert response.ok
        return np.asarray(Image.open(io.BytesIO(response.body())).convert("RGB"), dtype=np.int16)

    start, lifted_frame = frame("main", 0), frame("main", first_success)
    assert start.shape == (64, 64, 3)
    assert np.abs(start - lifted_frame).mean() > 1.0  # the arm moved and the cube rose
    assert np.abs(frame("main", first_success) - frame("extra", first_success)).mean() > 1.0  # two views
    # a rendered scene, not noise: neighbouring pixels are alike
    assert np.abs(np.diff(start, axis=1)).mean() < 20
    page.close()


@pytest.mark.slow
@pytest.mark.django_db
def test_a_demo_project_seeded_with_env_flag_labels_follows_the_lift_except_edited_labels(user):
    rendered = demo_episodes(3, size=64)  # cached by the test above (or rendered once)
    project = Project.objects.create(name=DEMO_PROJECT, camera_views=["main", "extra"])
    assert seed_pickcube_episodes(project=project, episodes=rendered, labels=ENV_SUCCESS) == 3
    episode = project.episodes.order_by("metadata__seed").first()
    steps = list(episode.steps.order_by("index"))
    edited = FrameLabel.objects.get(episode=episode, step=steps[0], source="human")
    edited.value, edited.author = "success", user  # a person relabeled the first frame
    edited.save()

    assert seed_demo_project(episodes=3, size=64, stdout=io.StringIO()) == project  # the run command, again
    human = dict(FrameLabel.objects.filter(episode=episode, source="human").values_list("step__index", "value"))
    assert human == {**lift_labels(steps), 0: "success"}
    others = FrameLabel.objects.filter(project=project, source="human").exclude(step__index=0, episode=episode)
    assert set(others.values_list("params__from", flat=True)) == {"lifted"}


@pytest.mark.slow
@pytest.mark.django_db
def test_a_demo_project_of_another_size_gets_its_new_episodes_at_its_own_size():
    project = seed_demo_project(episodes=2, size=64, stdout=io.StringIO())  # an earlier run command's size
    out = io.StringIO()
    assert seed_demo_project(episodes=3, size=128, stdout=out) == project  # today's default size
    assert "holds episodes rendered at 64 px" in out.getvalue()
    assert project.episodes.count() == 3
    assert set(Frame.objects.filter(step__episode__project=project).values_list("width", flat=True)) == {64}
