"""Label efficiency (bench/active.py's result) stored per project and shown on its evaluation pages: the
two curves with the labels each order needed, or an empty state saying how to measure it."""

from __future__ import annotations

import json
import re

import pytest

from training.queue.efficiency import label_efficiency_data, label_efficiency_store

RESULT = {
    "metric": "balanced accuracy",
    "all_labels_accuracy": 0.9,
    "target": 0.855,
    "curves": {
        "ranked": [[[8, 0.5], [16, 0.86], [24, 0.9]], [[8, 0.5], [16, 0.7], [24, 0.88]]],
        "random": [[[8, 0.5], [16, 0.6], [24, 0.7]], [[8, 0.5], [16, 0.6], [24, 0.87]]],
    },
}


@pytest.mark.django_db
def test_stored_result_gives_both_curves_and_the_labels_each_order_needed(project):
    assert label_efficiency_data(project=project) is None
    label_efficiency_store(project=project, result=RESULT, command="bench/active.py --seeds 2")
    data = label_efficiency_data(project=project)
    assert data is not None and data["metric"] == "balanced accuracy" and data["command"].endswith("--seeds 2")
    assert [(r["order"], r["seed"], r["needed"]) for r in data["runs"]] == [
        ("ranked", 0, 16), ("ranked", 1, 24), ("random", 0, None), ("random", 1, 24),
    ]  # fmt: skip
    assert data["runs"][0]["labels"] == [8, 16, 24] and data["runs"][0]["accuracy"] == [0.5, 0.86, 0.9]
    assert data["ranked_needed"] == 20 and data["random_needed"] == 24  # mean over seeds that reached it
    label_efficiency_store(project=project, result={**RESULT, "target": 0.5}, command="again")
    newest = label_efficiency_data(project=project)
    assert newest is not None and newest["ranked_needed"] == 8  # the newest replaces the last


@pytest.mark.django_db
@pytest.mark.parametrize(
    "bad",
    [
        {**RESULT, "curves": {"sideways": []}},
        {**RESULT, "curves": {"ranked": [[[8, 1.5]]]}},
        {**RESULT, "curves": {"ranked": [[["8", 0.5]]]}},
        {**RESULT, "target": 2},
        {k: v for k, v in RESULT.items() if k != "all_labels_accuracy"},
    ],
)
def test_a_malformed_result_is_refused(project, bad):
    with pytest.raises(ValueError):
        label_efficiency_store(project=project, result=bad, command="x")


@pytest.mark.django_db
def test_the_evaluation_page_embeds_the_curves_or_how_to_measure_them(user_client, project):
    from training.models import TrainedModel

    model = TrainedModel.objects.create(project=project, kind="resnet", name="m", checkpoint_path="none", config={})

    def page_data() -> dict:
        html = user_client.get(f"/projects/{project.pk}/compare?a={model.pk}&b={model.pk}").content.decode()
        assert 'id="label-efficiency"' in html
        raw = re.search(r'<script id="page-data" type="application/json">(.*?)</script>', html, re.S)
        assert raw
        return json.loads(raw.group(1))

    empty = page_data()
    assert empty["label_efficiency"] is None
    assert empty["label_efficiency_command"] == '.venv/bin/python bench/active.py --project "PickCube"'
    label_efficiency_store(project=project, result=RESULT, command="bench/active.py")
    shown = page_data()["label_efficiency"]
    assert shown["ranked_needed"] == 20 and len(shown["runs"]) == 4


@pytest.mark.django_db
def test_the_committed_pickcube_result_loads_and_gives_the_quoted_label_counts(project):
    """bench/results/active_pickcube_h100.json (the README's figures) is a result the pages can show."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "results" / "active_pickcube_h100.json"
    result = json.loads(path.read_text())
    label_efficiency_store(project=project, result=result, command=result["commands"]["ranked"])
    data = label_efficiency_data(project=project)
    assert data is not None
    needed = {order: [r["needed"] for r in data["runs"] if r["order"] == order] for order in ("ranked", "random")}
    assert needed == {"ranked": [32, 96, 64, 384, 128], "random": [64, 96, 384, 512, 256]}
    assert round(data["ranked_needed"], 1) == 140.8 and round(data["random_needed"], 1) == 262.4
