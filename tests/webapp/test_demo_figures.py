"""The demo model's label rule (when the cube counts as lifted) and its printed figures, without Django."""

from __future__ import annotations

import numpy as np

from webapp.demo.lift import FAIL, SUCCESS, frame_labels, lift_step, lifted_mask
from webapp.demo.report import SeedCheck, accuracy_at, live_lines, pick_threshold, seed_check

REST = 0.02  # PickCube's cube centre resting on the table


def test_the_lift_is_the_first_grasped_step_a_centimetre_up():
    heights = [REST, REST, REST + 0.005, REST + 0.012, REST + 0.05]
    grasped = [False, True, True, True, True]
    assert lift_step(heights, grasped) == 3
    assert lifted_mask(heights, grasped).tolist() == [False, False, False, True, True]


def test_a_cube_pushed_up_without_a_grasp_is_not_lifted():
    assert lift_step([REST, REST + 0.05, REST + 0.08], [False, False, False]) is None


def test_labels_leave_the_band_between_the_lift_and_clearly_up_unlabeled():
    heights = [REST, REST, REST + 0.015, REST + 0.03, REST + 0.2]
    assert frame_labels(heights, [False, True, True, True, True]) == [FAIL, FAIL, None, SUCCESS, SUCCESS]


def test_the_threshold_is_the_best_balanced_one_and_the_highest_on_a_tie():
    probs = [0.1, 0.2, 0.45, 0.7, 0.8, 0.9]
    labels = [0, 0, 0, 1, 1, 1]
    t = pick_threshold(probs, labels)
    assert t == 0.65  # 0.45 < t < 0.7 separates both classes; the highest such step wins
    assert accuracy_at(probs, labels, t) == 1.0 and accuracy_at(probs, labels, 0.3) < 1.0
    assert pick_threshold([0.2, 0.9], [1, 1]) == 0.5  # one class only: nothing to pick from


def test_a_seed_is_ok_only_when_the_first_crossing_comes_at_or_after_the_lift():
    probs = np.array([0.1, 0.2, 0.6, 0.9, 0.95])
    assert seed_check(1, probs, 0.5, lift=2).verdict == "ok"
    assert seed_check(2, probs, 0.5, lift=3).verdict == "early"
    assert seed_check(3, probs, 0.99, lift=2).verdict == "missed"
    assert seed_check(4, probs, 0.5, lift=None).verdict == "early (never lifted)"
    assert seed_check(5, probs, 0.99, lift=None).verdict == "not lifted"


def test_the_live_lines_name_each_seed_and_count_the_good_ones():
    checks = [
        SeedCheck(seed=7, lift_step=40, first_crossing=44, steps=90),
        SeedCheck(seed=8, lift_step=40, first_crossing=38, steps=90),
    ]
    lines = live_lines(checks, 0.65)
    assert lines[0] == "  seed 7: lift at step 40, first crossing of 0.65 at step 44 of 90 (ok, +4 steps)"
    assert lines[1] == "  seed 8: lift at step 40, first crossing of 0.65 at step 38 of 90 (early, -2 steps)"
    assert lines[-1] == "live check: 1/2 seeds cross the threshold only after the lift (goal: 9/10)"
