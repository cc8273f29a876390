"""Evaluation math against hand-computed cases."""

from __future__ import annotations

import pytest

from training.evaluation.metrics import (
    best_accuracy,
    confusion,
    error_order,
    metrics_at,
    pr_curve,
    reliability,
    rl_reward_preview,
    roc_curve,
    sanity_check,
)

PROBS = [0.9, 0.8, 0.6, 0.4, 0.3, 0.1]
LABELS = [1, 1, 0, 1, 0, 0]


def test_confusion_and_metrics_use_probability_strictly_above_threshold():
    c = confusion(PROBS, LABELS, 0.5)
    assert (c.tp, c.fp, c.tn, c.fn) == (2, 1, 2, 1)
    m = metrics_at(PROBS, LABELS, 0.5)
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert confusion([0.5], [1], 0.5).fn == 1  # 0.5 is not above 0.5


def test_roc_auc_counts_ranked_pairs():
    # positives 0.9, 0.8, 0.4 vs negatives 0.6, 0.3, 0.1: 8 of 9 pairs ranked right
    assert roc_curve(PROBS, LABELS)["auc"] == pytest.approx(8 / 9)
    assert roc_curve([0.9, 0.1], [1, 0])["auc"] == pytest.approx(1.0)


def test_average_precision_is_the_step_area():
    # thresholds 0.9 (P1 R1/3), 0.8 (P1 R2/3), 0.6 (P2/3), 0.4 (P3/4 R1): AP = 1/3 + 1/3 + 3/4 * 1/3
    assert pr_curve(PROBS, LABELS)["average_precision"] == pytest.approx(1 / 3 + 1 / 3 + 0.25)


def test_reliability_bins_and_ece():
    r = reliability([0.05, 0.15, 0.95, 0.95], [0, 0, 1, 0], bins=10)
    assert r["counts"][0] == 1 and r["counts"][1] == 1 and r["counts"][9] == 2
    assert r["observed"][9] == 0.5 and r["predicted"][9] == pytest.approx(0.95)
    assert r["ece"] == pytest.approx((0.05 + 0.15 + 2 * 0.45) / 4)


def test_error_order_puts_most_confidently_wrong_first():
    assert error_order(PROBS, LABELS)[:3] == [2, 3, 4]  # 0.6 on a fail, 0.4 on a success, 0.3 on a fail


def test_rl_preview_reports_what_a_run_receives():
    preview = rl_reward_preview(PROBS, LABELS, 0.5)
    assert preview["rewarded_fraction"] == pytest.approx(0.5)
    assert preview["mean_reward_on_success_frames"] == pytest.approx(2 / 3)
    assert preview["mean_reward_on_fail_frames"] == pytest.approx(1 / 3)
    assert preview["false_rewards"] == 1 and preview["missed_rewards"] == 1


def test_best_accuracy_is_the_best_threshold_on_the_ranking():
    assert best_accuracy(PROBS, LABELS) == pytest.approx(5 / 6)  # success above 0.35: one fail frame wrong
    assert best_accuracy([0.1, 0.2, 0.3], [0, 0, 1]) == 1.0


def test_the_sanity_check_flags_a_model_that_says_fail_everywhere_and_passes_a_good_one():
    # the tour's useless model: 'fail' on every frame, worse ranked than chance
    useless = sanity_check([0.01, 0.02, 0.03, 0.04, 0.05, 0.02], [1, 1, 0, 0, 0, 0])
    assert len(useless) == 2
    assert "no threshold beats always answering 'fail'" in useless[0] and "0.667" in useless[0]
    assert useless[1].startswith("ROC AUC 0.06 is under 0.55")
    assert sanity_check(PROBS, LABELS) == []  # AUC 0.89, best accuracy 0.83 against 0.5
    assert sanity_check([0.9, 0.8], [1, 1]) == []  # one class: nothing to judge
