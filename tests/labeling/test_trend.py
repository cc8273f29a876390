"""The trend rule against hand-computed cases (formats.md section 4)."""

from __future__ import annotations

import pytest

from labeling.proposals.trend import NEGATIVE, POSITIVE, UNCLEAR, TrendParams, trend_label, trend_windows

NO_TAIL = TrendParams(window_size=3, stride=1, delta_threshold=0.05, tail_unclear_ratio=0.0)


def test_delta_is_end_minus_start_score_and_sign_gives_label():
    scores = [0.0, 0.1, 0.2, 0.1, -0.2]
    windows = trend_windows(scores, NO_TAIL)
    assert [(w.start, w.end) for w in windows] == [(0, 2), (1, 3), (2, 4)]
    assert [w.label for w in windows] == [POSITIVE, UNCLEAR, NEGATIVE]
    assert [round(w.delta, 6) for w in windows] == [0.2, 0.0, -0.4]
    assert windows[2].start_score == 0.2 and windows[2].end_score == -0.2


def test_threshold_boundary_is_unclear_on_both_sides():
    assert trend_label(0.5, 0.5) == UNCLEAR
    assert trend_label(-0.5, 0.5) == UNCLEAR
    assert trend_label(0.5000001, 0.5) == POSITIVE
    assert trend_label(-0.5000001, 0.5) == NEGATIVE
    # exactly representable values, through the whole rule
    windows = trend_windows([0.0, 0.25, 0.5, 0.75], TrendParams(2, 1, 0.25, 0.0))
    assert [w.label for w in windows] == [UNCLEAR, UNCLEAR, UNCLEAR]
    windows = trend_windows([0.0, 0.5, 0.5, 0.0], TrendParams(2, 1, 0.25, 0.0))
    assert [w.label for w in windows] == [POSITIVE, UNCLEAR, NEGATIVE]


def test_tail_ratio_forces_last_windows_unclear():
    # 12 steps, window 3, stride 1 -> 10 windows; tail_start = int(10 * (1 - 0.25)) = 7 -> windows 7, 8, 9 forced.
    scores = [float(i) for i in range(12)]
    windows = trend_windows(scores, TrendParams(3, 1, 0.05, 0.25))
    assert len(windows) == 10
    assert [w.label for w in windows] == [POSITIVE] * 7 + [UNCLEAR] * 3
    assert [w.tail for w in windows] == [False] * 7 + [True] * 3
    assert windows[-1].delta == 2.0  # the delta is still stored for forced windows


def test_default_tail_ratio_forces_three_of_twenty():
    # 24 steps, window 5 -> 20 windows; int(20 * (1 - 0.15)) = 17 -> windows 17, 18, 19 forced.
    windows = trend_windows([float(i) for i in range(24)], TrendParams())
    assert sum(w.tail for w in windows) == 3
    assert windows[16].label == POSITIVE and windows[17].label == UNCLEAR


def test_tail_start_uses_rlinf_float_truncation():
    # RLinf computes int(10 * (1.0 - 0.9)) = int(0.9999999999999998) = 0: all ten windows are forced, not nine.
    windows = trend_windows([float(i) for i in range(11)], TrendParams(2, 1, 0.05, 0.9))
    assert len(windows) == 10 and all(w.tail for w in windows)


def test_stride_and_step_indices():
    scores = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    windows = trend_windows(scores, TrendParams(3, 2, 0.05, 0.0), indices=[10, 11, 12, 13, 14, 15, 16])
    assert [(w.start, w.end) for w in windows] == [(10, 12), (12, 14), (14, 16)]


def test_window_missing_a_view_is_skipped_but_counts_for_the_tail():
    scores = [float(i) for i in range(6)]
    complete = [True, True, False, True, True, True]
    # window 2, stride 1 -> 5 windows; (1,2) and (2,3) skipped; tail_start = int(5 * 0.8) = 4 -> window 4 forced.
    windows = trend_windows(scores, TrendParams(2, 1, 0.05, 0.2), complete=complete)
    assert [(w.start, w.label) for w in windows] == [(0, POSITIVE), (3, POSITIVE), (4, UNCLEAR)]


def test_short_episode_has_no_windows():
    assert trend_windows([0.0, 1.0], TrendParams(window_size=5)) == []


@pytest.mark.parametrize(
    "kwargs", [{"window_size": 0}, {"stride": 0}, {"delta_threshold": -1.0}, {"tail_unclear_ratio": 1.5}]
)
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ValueError):
        TrendParams(**kwargs)
