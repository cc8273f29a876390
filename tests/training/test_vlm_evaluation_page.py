"""The VLM evaluation page (a training view, training/templates/training/vlm_evaluation.html): per-class
figures, the confusion matrix, the most confidently wrong windows linked to the labeling page."""

from __future__ import annotations

import io
import json

import pytest


@pytest.mark.django_db
def test_evaluation_page_links_each_wrong_window_to_the_labeling_page(project, user_client):
    from django.core.files.storage import default_storage
    from django.test import Client

    from training.models import TrainedModel
    from training.vlm.evaluation import trend_evaluate

    probs = [[0.1, 0.8, 0.1], [0.7, 0.2, 0.1], [0.2, 0.2, 0.6]]
    evaluation = trend_evaluate(probs, ["positive", "positive", "negative"])
    evaluation["windows"] = [
        {
            "start_step": 3 * i,
            "end_step": 3 * i + 4,
            "source_episode_path": f"ep{i}",
            "link": f"/episodes/u{i}/label?step={3 * i}",
        }
        for i in range(3)
    ]
    name = "checkpoints/vlm_eval_page"
    default_storage.save(f"{name}/evaluation.json", io.BytesIO(json.dumps(evaluation).encode()))
    model = TrainedModel.objects.create(project=project, kind="vlm", name="trend", checkpoint_path=name)
    page = user_client.get(f"/models/{model.pk}/vlm-evaluation").content.decode()
    wrong = page[page.index('id="wrong"') :]
    # most confidently wrong first: window 0 (negative at 0.8), then window 2 (unclear at 0.6)
    assert wrong.index("/episodes/u0/label?step=0") < wrong.index("/episodes/u2/label?step=6")
    assert "/episodes/u1/label" not in wrong
    assert "<td>positive</td><td>1.000</td><td>0.500</td><td>2</td>" in page.replace("\n", "").replace("  ", "")
    assert Client().get(f"/models/{model.pk}/vlm-evaluation").status_code == 302  # login required
    # the generic evaluation link of the models table leads here for VLM models
    assert user_client.get(f"/models/{model.pk}/evaluation")["Location"] == f"/models/{model.pk}/vlm-evaluation"


@pytest.mark.django_db
def test_a_vlm_model_without_an_evaluation_file_is_not_found_and_a_resnet_model_has_no_vlm_page(project, user_client):
    from training.models import TrainedModel

    vlm = TrainedModel.objects.create(project=project, kind="vlm", name="trend", checkpoint_path="checkpoints/none")
    resnet = TrainedModel.objects.create(project=project, kind="resnet", name="r", checkpoint_path="checkpoints/r")
    missing = user_client.get(f"/models/{vlm.pk}/vlm-evaluation")
    assert missing.status_code == 404
    assert user_client.get(f"/models/{resnet.pk}/vlm-evaluation").status_code == 404
