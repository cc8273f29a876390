"""Evaluation of a binary reward classifier on its validation split (numpy only).

Success at a threshold is `probability > threshold`, exactly as the reward server decides it
(shared/reference formats section 5), so what the threshold picker shows is what an RL run receives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from typing_extensions import TypedDict  # pydantic (tests) needs typing_extensions' TypedDict on 3.11

# What the functions below return, as the evaluation page and API send it (webapp.page_data uses these).


class ConfusionCounts(TypedDict):
    tp: int
    fp: int
    tn: int
    fn: int


class ThresholdMetrics(TypedDict):
    threshold: float
    accuracy: float
    precision: float
    recall: float
    f1: float
    false_positive_rate: float
    confusion: ConfusionCounts


class RocCurve(TypedDict):
    fpr: list[float]
    tpr: list[float]
    thresholds: list[float | None]
    auc: float


class PrCurve(TypedDict):
    precision: list[float]
    recall: list[float]
    thresholds: list[float]
    average_precision: float


class Reliability(TypedDict):
    bin_centers: list[float]
    predicted: list[float | None]
    observed: list[float | None]
    counts: list[int]
    ece: float


class RewardPreview(TypedDict):
    """What an RL run would receive at the threshold, split by true label."""

    threshold: float
    rewarded_fraction: float
    mean_reward_on_success_frames: float | None
    mean_reward_on_fail_frames: float | None
    false_rewards: int
    missed_rewards: int


class PrecisionDifference(TypedDict):
    """One reduced inference precision against fp32 on the same validation frames (`precision_difference`)."""

    precision: str  # bf16 or fp16
    device: str  # where it was measured (the web process's device)
    frames: int  # the first `frames` validation frames
    probabilities: list[float]  # at this precision (empty when refused); the page recounts flips per threshold
    max_abs: float | None  # largest |p - p_fp32|
    mean_abs: float | None
    flips: int | None  # frames whose decision (probability > threshold) differs from fp32's
    refused: str  # why this device cannot run it ("" when measured)


class EvaluationSummary(TypedDict):
    count: int
    positives: int
    at_threshold: ThresholdMetrics
    roc: RocCurve
    pr: PrCurve
    reliability: Reliability
    rl_preview: RewardPreview
    sanity: list[str]  # why the model may be useless (empty: it passed the sanity check)


@dataclass(frozen=True)
class Confusion:
    tp: int
    fp: int
    tn: int
    fn: int

    @property
    def total(self) -> int:
        return self.tp + self.fp + self.tn + self.fn

    def as_dict(self) -> ConfusionCounts:
        return {"tp": self.tp, "fp": self.fp, "tn": self.tn, "fn": self.fn}


def _arrays(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=np.float64).ravel()
    y = np.asarray(labels).astype(bool).ravel()
    if p.shape != y.shape:
        raise ValueError("probabilities and labels differ in length")
    return p, y


def confusion(probs, labels, threshold: float = 0.5) -> Confusion:
    p, y = _arrays(probs, labels)
    predicted = p > threshold
    return Confusion(
        tp=int(np.sum(predicted & y)),
        fp=int(np.sum(predicted & ~y)),
        tn=int(np.sum(~predicted & ~y)),
        fn=int(np.sum(~predicted & y)),
    )


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b else 0.0


def metrics_at(probs, labels, threshold: float = 0.5) -> ThresholdMetrics:
    c = confusion(probs, labels, threshold)
    precision = _ratio(c.tp, c.tp + c.fp)
    recall = _ratio(c.tp, c.tp + c.fn)
    return {
        "threshold": threshold,
        "accuracy": _ratio(c.tp + c.tn, c.total),
        "precision": precision,
        "recall": recall,
        "f1": _ratio(2 * precision * recall, precision + recall),
        "false_positive_rate": _ratio(c.fp, c.fp + c.tn),
        "confusion": c.as_dict(),
    }


def roc_curve(probs, labels) -> RocCurve:
    """False/true positive rates at every distinct threshold (predicted success is p > t), and the AUC."""
    p, y = _arrays(probs, labels)
    thresholds = np.concatenate([[np.inf], np.unique(p)[::-1], [-np.inf]])
    positives, negatives = max(int(y.sum()), 1), max(int((~y).sum()), 1)
    tpr = np.array([np.sum((p > t) & y) / positives for t in thresholds])
    fpr = np.array([np.sum((p > t) & ~y) / negatives for t in thresholds])
    # thresholds are descending, so fpr/tpr rise; AUC by trapezoids
    auc = float(np.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2))
    return {"fpr": fpr.tolist(), "tpr": tpr.tolist(), "thresholds": _finite(thresholds), "auc": auc}


def pr_curve(probs, labels) -> PrCurve:
    """Precision and recall at every distinct threshold, and average precision (step-wise area)."""
    p, y = _arrays(probs, labels)
    thresholds = np.unique(p)[::-1]
    positives = int(y.sum())
    precision: list[float] = []
    recall: list[float] = []
    for t in thresholds:
        predicted = p >= t
        tp = int(np.sum(predicted & y))
        precision.append(_ratio(tp, int(predicted.sum())))
        recall.append(_ratio(tp, positives))
    ap, previous_recall = 0.0, 0.0
    for prec, rec in zip(precision, recall, strict=True):
        ap += (rec - previous_recall) * prec
        previous_recall = rec
    return {"precision": precision, "recall": recall, "thresholds": thresholds.tolist(), "average_precision": float(ap)}


def reliability(probs, labels, bins: int = 10) -> Reliability:
    """Per probability bin: mean predicted probability, observed success rate and count; the ECE."""
    p, y = _arrays(probs, labels)
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip(np.digitize(p, edges[1:-1], right=False), 0, bins - 1)
    predicted: list[float | None] = []
    observed: list[float | None] = []
    counts: list[int] = []
    ece = 0.0
    for b in range(bins):
        mask = index == b
        n = int(mask.sum())
        counts.append(n)
        if n:
            mean_p, rate = float(p[mask].mean()), float(y[mask].mean())
            ece += n / len(p) * abs(mean_p - rate)
        else:
            mean_p, rate = None, None
        predicted.append(mean_p)
        observed.append(rate)
    centers = ((edges[:-1] + edges[1:]) / 2).tolist()
    return {"bin_centers": centers, "predicted": predicted, "observed": observed, "counts": counts, "ece": float(ece)}


def error_order(probs, labels) -> list[int]:
    """Indices from most confidently wrong to most confidently right (by |label - probability|)."""
    p, y = _arrays(probs, labels)
    error = np.abs(y.astype(np.float64) - p)
    return [int(i) for i in np.argsort(-error, kind="stable")]


def rl_reward_preview(
    probs, labels, threshold: float = 0.5, *, success_reward: float = 1.0, fail_reward: float = 0.0
) -> RewardPreview:
    """What an RL run would receive per frame with binary rewards at this threshold, split by true label."""
    p, y = _arrays(probs, labels)
    reward = np.where(p > threshold, success_reward, fail_reward)
    return {
        "threshold": threshold,
        "rewarded_fraction": float(np.mean(p > threshold)) if len(p) else 0.0,
        "mean_reward_on_success_frames": float(reward[y].mean()) if y.any() else None,
        "mean_reward_on_fail_frames": float(reward[~y].mean()) if (~y).any() else None,
        "false_rewards": int(np.sum((p > threshold) & ~y)),
        "missed_rewards": int(np.sum((p <= threshold) & y)),
    }


def threshold_sweep(probs, labels, steps: int = 101) -> list[dict]:
    """Metrics and the RL preview at evenly spaced thresholds (for plots and quick lookups)."""
    out = []
    for t in np.linspace(0.0, 1.0, steps):
        m = metrics_at(probs, labels, float(t))
        out.append({**m, **rl_reward_preview(probs, labels, float(t))})
    return out


MIN_USEFUL_AUC = 0.55  # below it a model ranks success above fail little better than chance


def best_accuracy(probs, labels) -> float:
    """The accuracy at the best threshold: the top k frames by probability called success, for the best k."""
    p, y = _arrays(probs, labels)
    if not len(p):
        return 0.0
    ranked = y[np.argsort(-p, kind="stable")]
    true_positives = np.concatenate([[0], np.cumsum(ranked)])
    called = np.arange(len(p) + 1)
    negatives = len(p) - int(y.sum())
    correct = true_positives + (negatives - (called - true_positives))
    return float(correct.max() / len(p))


def sanity_check(probs, labels) -> list[str]:
    """Why a model may be useless as a reward, in sentences: no threshold beats always giving the majority
    answer, or its ROC AUC is under MIN_USEFUL_AUC. Empty when it passes (or there is nothing to judge)."""
    p, y = _arrays(probs, labels)
    positives = int(y.sum())
    if not len(p) or positives in (0, len(p)):
        return []
    majority = max(positives, len(p) - positives) / len(p)
    answer = "success" if positives * 2 > len(p) else "fail"
    problems = []
    best = best_accuracy(p, y)
    if best <= majority + 1e-9:
        problems.append(
            f"no threshold beats always answering {answer!r}: the best accuracy is {best:.3f}, the share of "
            f"{answer} frames in validation {majority:.3f}"
        )
    auc = roc_curve(p, y)["auc"]
    if auc < MIN_USEFUL_AUC:
        problems.append(
            f"ROC AUC {auc:.2f} is under {MIN_USEFUL_AUC}: it ranks success frames little better than chance"
        )
    return problems


def evaluate_predictions(probs, labels, threshold: float = 0.5) -> EvaluationSummary:
    return {
        "count": int(len(np.asarray(probs))),
        "positives": int(np.asarray(labels).astype(bool).sum()),
        "at_threshold": metrics_at(probs, labels, threshold),
        "roc": roc_curve(probs, labels),
        "pr": pr_curve(probs, labels),
        "reliability": reliability(probs, labels),
        "rl_preview": rl_reward_preview(probs, labels, threshold),
        "sanity": sanity_check(probs, labels),
    }


def _finite(values: np.ndarray) -> list[float | None]:
    return [float(v) if np.isfinite(v) else None for v in values]


def precision_difference(reference, other, threshold: float = 0.5) -> tuple[float, float, int]:
    """(max |difference|, mean |difference|, decisions flipped at the threshold) of `other` probabilities
    against the `reference` (fp32) ones for the same frames, in the same order."""
    ref, oth = np.asarray(reference, dtype=np.float64), np.asarray(other, dtype=np.float64)
    if ref.shape != oth.shape:
        raise ValueError(f"{len(oth)} probabilities to compare with {len(ref)}")
    if ref.size == 0:
        return 0.0, 0.0, 0
    difference = np.abs(oth - ref)
    flips = int(np.count_nonzero((ref > threshold) != (oth > threshold)))
    return float(difference.max()), float(difference.mean()), flips
