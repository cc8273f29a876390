"""`manage.py demo` end to end on a tiny scale: the demo's PickCube episodes (one with a missed grasp) labeled
by the lift, a ResNet trained on the CPU, a deployment at the threshold picked from validation, the live
check on a new seed through the inference worker's scorer, and the figures printed at the end."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from inference.models import Deployment
from labeling.models import Episode, FrameLabel
from projects.auth import agent_for_token
from webapp.demo.lift import frame_labels

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FIGURES = re.compile(
    r"validation accuracy: (?P<acc>[\d.]+) at 0\.5, (?P<acc_t>[\d.]+) at the deployment threshold "
    r"(?P<threshold>[\d.]+) \((?P<frames>\d+) frames of held-out episodes\)"
)
SEED_LINE = re.compile(
    r"  seed (?P<seed>\d+): lift at step (?P<lift>\w+), first crossing of (?P<threshold>[\d.]+) at step "
    r"(?P<crossing>\w+) of (?P<steps>\d+) \((?P<verdict>ok|early|missed|not lifted)"
)


def test_demo_trains_on_lifted_cube_labels_deploys_and_prints_its_figures(settings, tmp_path):
    settings.DATA_DIR = tmp_path  # the demo agent's token file goes here, not into the developer's data/
    out = io.StringIO()
    call_command("demo", episodes=3, epochs=1, size=32, eval_seeds=1, project="PickCube", stdout=out)
    text = out.getvalue()

    episodes = list(Episode.objects.filter(project__name="PickCube").order_by("metadata__seed"))
    assert [e.metadata["grasp_perturbed"] for e in episodes] == [False, False, True]
    for episode in episodes:
        steps = list(episode.steps.order_by("index"))
        expected = frame_labels([s.info["cube_height"] for s in steps], [s.info["is_grasped"] for s in steps])
        human = dict(FrameLabel.objects.filter(episode=episode, source="human").values_list("step__index", "value"))
        assert human == {i: v for i, v in enumerate(expected) if v is not None}
        successes = sum(v == "success" for v in human.values())
        if episode.metadata["grasp_perturbed"]:
            assert successes == 0 and episode.success is False  # the open hand never lifts the cube
        else:
            first = min(i for i, v in human.items() if v == "success")
            assert first > 20 and successes > 5  # lifted after reach and grasp, then held up
            assert steps[first].info["is_grasped"] and steps[first].info["cube_height"] > steps[0].info["cube_height"]
        assert steps[0].frames.count() == 2  # both cameras

    cached = {p.name for p in settings.DEMO_CACHE_DIR.glob("pickcube-*-32px-*.npz")}
    assert {"pickcube-v2-32px-scripted-2000.npz", "pickcube-v2-32px-openhand-2002.npz"} <= cached  # rendered once
    assert not any("-12000." in name for name in cached)  # the live check's new seed is played, not cached

    deployment = Deployment.objects.get(name="pickcube-resnet")
    assert deployment.trained_model.project.name == "PickCube" and deployment.trained_model.kind == "resnet"
    figures = FIGURES.search(text)
    assert figures, text
    assert 0.0 <= float(figures["acc"]) <= 1.0 and int(figures["frames"]) > 0
    assert float(figures["threshold"]) == pytest.approx(deployment.threshold)  # deployed at the picked threshold
    seed_line = SEED_LINE.search(text)
    assert seed_line and seed_line["seed"] == "12000", text
    assert int(seed_line["lift"]) > 20  # the scripted policy lifts the cube on the new seed, after the reach
    verdict_ok = seed_line["verdict"] == "ok"
    assert f"live check: {int(verdict_ok)}/1 seeds cross the threshold only after the lift" in text
    assert re.search(r"^wall time: \d+ s$", text, re.M)
    assert "--deployment pickcube-resnet" in text and "demo ready" in text
    token = (tmp_path / "demo_agent_token.txt").read_text().strip()
    assert agent_for_token(token).name == "demo-agent"  # the printed command's token works

    first_version = deployment.version
    again = io.StringIO()  # idempotent: episodes are kept, a new model is deployed under the same name
    call_command("demo", episodes=3, epochs=1, size=32, eval_seeds=0, stdout=again)
    assert "stored 0 new episodes in 'PickCube' (3 in all)" in again.getvalue()
    assert "live check" not in again.getvalue()
    assert Episode.objects.filter(project__name="PickCube").count() == 3
    assert Deployment.objects.get(name="pickcube-resnet").version > first_version  # switched to the new model
    with pytest.raises(CommandError, match="rendered at 32 px, not 48 px"):  # no snapshot of mixed sizes
        call_command("demo", episodes=3, epochs=1, size=48, eval_seeds=0, stdout=io.StringIO())
