"""Trend classifier evaluation: per-class precision/recall, confusion matrix, most confidently wrong."""

from __future__ import annotations

import numpy as np

from .labels import LABELS


def trend_evaluate(probabilities: np.ndarray, labels: list[str], *, worst: int = 20) -> dict:
    """Metrics for [N, 3] probabilities (LABELS order) against true labels.

    `confusion[i][j]` counts windows of true label LABELS[i] predicted as LABELS[j]. `wrong` lists the
    misclassified windows, most confident first, as {index, label, predicted, confidence, probabilities}.
    """
    probs = np.asarray(probabilities, dtype=np.float64).reshape(-1, len(LABELS))
    if len(probs) != len(labels):
        raise ValueError("probabilities and labels differ in length")
    truth = np.array([LABELS.index(label) for label in labels], dtype=np.int64)
    pred = probs.argmax(axis=1) if len(probs) else np.zeros(0, dtype=np.int64)
    confusion = np.zeros((len(LABELS), len(LABELS)), dtype=np.int64)
    np.add.at(confusion, (truth, pred), 1)
    per_class = {}
    for i, label in enumerate(LABELS):
        tp = int(confusion[i, i])
        predicted = int(confusion[:, i].sum())
        actual = int(confusion[i, :].sum())
        per_class[label] = {
            "precision": tp / predicted if predicted else None,
            "recall": tp / actual if actual else None,
            "support": actual,
        }
    wrong_idx = np.flatnonzero(pred != truth)
    confidence = probs[wrong_idx, pred[wrong_idx]] if len(wrong_idx) else np.zeros(0)
    order = wrong_idx[np.argsort(-confidence, kind="stable")][:worst]
    wrong = [
        {
            "index": int(i),
            "label": labels[i],
            "predicted": LABELS[int(pred[i])],
            "confidence": float(probs[i, pred[i]]),
            "probabilities": [float(p) for p in probs[i]],
        }
        for i in order
    ]
    return {
        "labels": list(LABELS),
        "count": len(labels),
        "accuracy": float((pred == truth).mean()) if len(labels) else None,
        "per_class": per_class,
        "confusion": confusion.tolist(),
        "wrong": wrong,
    }


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def trend_evaluation_rows(evaluation: dict) -> dict:
    """A stored evaluation (`trend_evaluate`'s dict plus each eval window's `windows` metadata) as the
    evaluation page's rows: formatted per-class figures, the confusion matrix by true label, and the
    most confidently wrong windows with where they are and their labeling-page link."""
    windows = evaluation.get("windows") or []
    wrong = []
    for item in evaluation["wrong"]:
        meta = windows[item["index"]] if item["index"] < len(windows) else {}
        where = (
            f"{meta.get('source_episode_path', '?')} steps {meta.get('start_step', '?')}-{meta.get('end_step', '?')}"
        )
        wrong.append({**item, "confidence": _fmt(item["confidence"]), "link": meta.get("link"), "where": where})
    per_class = evaluation["per_class"]
    return {
        "count": evaluation.get("count", 0),
        "accuracy": _fmt(evaluation.get("accuracy")),
        "labels": list(LABELS),
        "per_class": [
            {
                "label": label,
                "precision": _fmt(per_class[label]["precision"]),
                "recall": _fmt(per_class[label]["recall"]),
                "support": per_class[label]["support"],
            }
            for label in LABELS
        ],
        "confusion": [
            {"label": label, "counts": row} for label, row in zip(LABELS, evaluation["confusion"], strict=True)
        ],
        "wrong": wrong,
    }
