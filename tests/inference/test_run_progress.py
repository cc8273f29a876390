"""The RL panel's series (inference/monitor/run_progress.py) out of the monitor's per-run counters."""

from __future__ import annotations

import pytest

from inference.monitor import rules as monitor
from inference.monitor.run_progress import panel_runs, polyline, progress_of


def test_each_run_gets_its_env_success_and_mean_probability_per_time_bucket():
    early = monitor.tally([0.9, 0.8, 0.2, 0.1], 0.5, env_success=[False, False, False, False], run="c/a")
    late = monitor.tally([0.9, 0.8, 0.7, 0.1], 0.5, env_success=[True, True, True, False], run="c/a")
    other = monitor.tally([0.4], 0.5, env_success=[True], run="c/b")
    plain = monitor.tally([0.9, 0.9], 0.5)  # no env flags: no run series

    runs = progress_of({0: early + plain, 10: late + other})

    assert sorted(runs) == ["c/a", "c/b"]
    a = runs["c/a"]
    assert a["times"] == [0, 10] and a["frames"] == [4, 4]
    assert a["env_success"] == [0.0, 0.75]
    assert a["reward"] == [pytest.approx(0.5), pytest.approx(0.625)]
    assert a["judged"] == [0.5, 0.75]  # the model's success verdicts on the same frames
    assert runs["c/b"]["times"] == [10] and runs["c/b"]["judged"] == [0.0]


def test_panel_rows_plot_values_in_the_unit_range_bottom_up():
    points = {
        0: monitor.tally([0.1], 0.5, env_success=[False], run="r"),
        10: monitor.tally([0.9], 0.5, env_success=[True], run="r"),
    }
    (row,) = panel_runs(points)
    assert (row["env_first"], row["env_last"], row["frames"], row["points"]) == (0.0, 1.0, 2, 2)
    assert row["env_line"] == polyline([0.0, 1.0]) == "0.0,90.0 320.0,0.0"
    assert polyline([]) == "" and polyline([2.0]) == "0.0,0.0"
