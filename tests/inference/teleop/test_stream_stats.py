"""A live stream's counters, rolling figures and warning throttle, driven by a fake clock (no sockets)."""

from __future__ import annotations

import pytest

from inference.teleop.stream_stats import IDLE_S, WARN_EVERY_S, WINDOW, CountDelta, StreamStats


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_the_rate_is_steps_per_second_over_the_window_and_zero_when_idle(clock):
    stats = StreamStats(clock)
    assert stats.rate_hz() == 0.0
    for _ in range(11):  # 10 Hz for one second
        stats.step_received()
        clock.now += 0.1
    assert stats.rate_hz() == pytest.approx(10.0)
    for _ in range(WINDOW):  # then 20 Hz: the old steps leave the window
        stats.step_received()
        clock.now += 0.05
    assert stats.rate_hz() == pytest.approx(20.0)
    clock.now += IDLE_S + 0.01
    assert stats.rate_hz() == 0.0
    assert stats.status()["steps"] == 11 + WINDOW


def test_latency_percentiles_and_the_last_probability_come_from_scored_frames(clock):
    stats = StreamStats(clock)
    assert stats.status()["inference_ms_p50"] is None and stats.status()["last_probability"] is None
    for ms in range(1, 101):
        stats.scored(inference_ms=float(ms), probability=ms / 100)
    status = stats.status()
    assert status["inferred"] == 100
    assert status["inference_ms_p50"] == pytest.approx(75.5)  # the last WINDOW (51..100) only
    assert status["inference_ms_p95"] == pytest.approx(97.55)
    assert status["last_probability"] == 1.0


def test_each_delta_counts_only_what_happened_since_the_previous_one(clock):
    stats = StreamStats(clock)
    for _ in range(3):
        stats.step_received()
    stats.frame_dropped()
    stats.scored(inference_ms=5.0, probability=0.2)
    stats.bad_frame()
    assert stats.take_delta() == CountDelta(steps=3, inferred=1, dropped=1)
    assert stats.take_delta() == CountDelta(0, 0, 0)
    stats.step_received()
    assert stats.take_delta() == CountDelta(1, 0, 0)
    assert stats.status()["bad_frames"] == 1 and stats.status()["dropped"] == 1


def test_the_same_warning_passes_once_per_period_and_others_are_not_held_back(clock):
    stats = StreamStats(clock)
    assert stats.may_warn("deployment x is loading")
    assert not stats.may_warn("deployment x is loading")
    assert stats.may_warn("step 4 skipped")
    clock.now += WARN_EVERY_S - 0.01
    assert not stats.may_warn("deployment x is loading")
    clock.now += 0.02
    assert stats.may_warn("deployment x is loading")
