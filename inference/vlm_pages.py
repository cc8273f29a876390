"""The evaluation page of a trained VLM trend model: per-class precision and recall, the confusion
matrix, and the eval windows the model got most confidently wrong, each one click from labeling."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.template import engines

from labeling import access
from training.models import TrainedModel
from training.storage import local_path
from training.vlm.labels import LABELS
from training.vlm.train import EVALUATION_FILE

PAGE = """{% extends "base.html" %}
{% block title %}{{ model.name }}: trend evaluation{% endblock %}
{% block content %}
<h1>{{ model.name }}</h1>
<p class="muted">Qwen3-VL trend model evaluated on {{ evaluation.count }} eval windows of its snapshot.
Accuracy <strong>{{ accuracy }}</strong>.</p>
<section class="panel">
  <h2>Per class</h2>
  <table class="grid" id="per-class">
    <tr><th>label</th><th>precision</th><th>recall</th><th>windows</th></tr>
    {% for row in per_class %}
    <tr><td>{{ row.label }}</td><td>{{ row.precision }}</td><td>{{ row.recall }}</td><td>{{ row.support }}</td></tr>
    {% endfor %}
  </table>
</section>
<section class="panel">
  <h2>Confusion matrix</h2>
  <table class="grid" id="confusion">
    <tr><th>true \\ predicted</th>{% for label in labels %}<th>{{ label }}</th>{% endfor %}</tr>
    {% for row in confusion %}
    <tr><th>{{ row.label }}</th>{% for n in row.counts %}<td>{{ n }}</td>{% endfor %}</tr>
    {% endfor %}
  </table>
</section>
<section class="panel">
  <h2>Most confidently wrong</h2>
  {% if wrong %}
  <table class="grid" id="wrong">
    <tr><th>window</th><th>label</th><th>predicted</th><th>confidence</th><th></th></tr>
    {% for w in wrong %}
    <tr>
      <td>{{ w.where }}</td><td>{{ w.label }}</td><td>{{ w.predicted }}</td><td>{{ w.confidence }}</td>
      <td>{% if w.link %}<a href="{{ w.link }}">label</a>{% endif %}</td>
    </tr>
    {% endfor %}
  </table>
  {% else %}<p class="empty">No eval window was misclassified.</p>{% endif %}
</section>
{% endblock %}
"""


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def evaluation_context(model: TrainedModel) -> dict:
    path = local_path(model.checkpoint_path) / EVALUATION_FILE
    if not path.is_file():
        raise Http404("this model has no trend evaluation (its snapshot had no eval windows)")
    evaluation = json.loads(path.read_text())
    windows = evaluation.get("windows") or []
    wrong = []
    for item in evaluation["wrong"]:
        meta = windows[item["index"]] if item["index"] < len(windows) else {}
        where = (
            f"{meta.get('source_episode_path', '?')} steps {meta.get('start_step', '?')}-{meta.get('end_step', '?')}"
        )
        wrong.append({**item, "confidence": _fmt(item["confidence"]), "link": meta.get("link"), "where": where})
    return {
        "model": model,
        "evaluation": evaluation,
        "accuracy": _fmt(evaluation.get("accuracy")),
        "labels": LABELS,
        "per_class": [
            {
                "label": label,
                "precision": _fmt(evaluation["per_class"][label]["precision"]),
                "recall": _fmt(evaluation["per_class"][label]["recall"]),
                "support": evaluation["per_class"][label]["support"],
            }
            for label in LABELS
        ],
        "confusion": [
            {"label": label, "counts": row} for label, row in zip(LABELS, evaluation["confusion"], strict=True)
        ],
        "wrong": wrong,
    }


@login_required
def vlm_evaluation(request, model_id: int):
    model = get_object_or_404(TrainedModel.objects.select_related("project"), pk=model_id, kind="vlm")
    access.require_page(request, access.TRAINING_VIEW, model.project)
    template = engines["django"].from_string(PAGE)
    return HttpResponse(template.render(evaluation_context(model), request))
