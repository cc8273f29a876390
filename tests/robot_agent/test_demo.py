"""`manage.py demo` end to end on a tiny scale: scripted PickCube episodes that reach env success, their
env-success proposals accepted as labels, a ResNet trained on the CPU, and a deployment serving it."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from inference.models import Deployment
from labeling.auth import agent_for_token
from labeling.models import Episode, FrameLabel

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_demo_collects_labels_trains_and_deploys(settings, tmp_path):
    settings.DATA_DIR = tmp_path  # the demo agent's token file goes here, not into the developer's data/
    out = io.StringIO()
    call_command(
        "demo",
        episodes=2,
        epochs=1,
        size=32,
        eval_seeds=1,
        project="PickCube",
        deployment="pickcube-resnet",
        stdout=out,
    )
    text = out.getvalue()

    episodes = list(Episode.objects.filter(project__name="PickCube", metadata__policy="scripted"))
    assert len(episodes) == 2
    for episode in episodes:
        steps = list(episode.steps.order_by("index"))
        first_success = next(s.index for s in steps if s.env_success)
        assert first_success > 20 and steps[-1].env_success  # lifted after reach and grasp, then held
        assert episode.success is True and steps[0].frames.count() == 2
        human = FrameLabel.objects.filter(episode=episode, source="human")
        assert human.count() == len(steps)  # every env-success proposal accepted
        assert human.filter(value="success").count() == sum(s.env_success for s in steps)
    deployment = Deployment.objects.get(name="pickcube-resnet")
    assert deployment.trained_model.project.name == "PickCube" and deployment.trained_model.kind == "resnet"
    assert "demo ready" in text and "--deployment pickcube-resnet" in text
    assert "validation accuracy: " in text and "only once the cube was lifted on " in text and " of 1 seeds" in text
    token = (tmp_path / "demo_agent_token.txt").read_text().strip()
    assert agent_for_token(token).name == "demo-agent"  # the printed command's token works

    first_version = deployment.version
    again = io.StringIO()  # idempotent: episodes are kept, a new model is deployed under the same name
    call_command("demo", episodes=2, epochs=1, size=32, eval_seeds=0, stdout=again)
    assert "collecting 0 scripted PickCube episodes (2 already stored)" in again.getvalue()
    assert Episode.objects.filter(project__name="PickCube").count() == 2
    assert Deployment.objects.get(name="pickcube-resnet").version > first_version  # switched to the new model
