"""RLinf 0.3.0's HistoryManager and a `history_buffer` deployment's counting build the same windows."""

from __future__ import annotations

import numpy as np

from inference.rewards import RewardSettings, history_step

from .conftest import side_run

ENVS, STEPS = 6, 40
SETTINGS = [
    {"history_size": 5, "min_history_size": 1, "input_interval": 1, "input_on_done": False},
    {"history_size": 5, "min_history_size": 0, "input_interval": 0, "input_on_done": True},  # interval unset
    {"history_size": 5, "min_history_size": 3, "input_interval": 2, "input_on_done": True},
    {"history_size": 4, "min_history_size": 2, "input_interval": 3, "input_on_done": True},
    {"history_size": 3, "min_history_size": 1, "input_interval": 5, "input_on_done": True},
]


def our_windows(settings: dict, dones: list[list[bool]]) -> list[list[int]]:
    reward = RewardSettings(reward_mode="history_buffer", **settings)
    counts = [0] * len(dones[0])
    out = []
    for step_dones in dones:
        row = []
        for env, done in enumerate(step_dones):
            window, counts[env] = history_step(counts[env], reward, done=done)
            row.append(window)
        out.append(row)
    return out


def test_rlinf_history_manager_and_our_counting_give_the_same_windows():
    dones = (np.random.default_rng(0).random((STEPS, ENVS)) < 0.12).tolist()
    for settings in SETTINGS:
        theirs = side_run("history_windows", settings=settings, dones=dones)["lengths"]
        ours = our_windows(settings, dones)
        minimum = settings["min_history_size"]
        for step in range(STEPS):
            for env in range(ENVS):
                rlinf = theirs[step][env]
                # the one intended difference: a done step's short window is not scored below min_history_size
                # (RLinf would hand a video model a window it cannot take); everything else is RLinf's
                expected = rlinf if rlinf >= minimum else 0
                assert ours[step][env] == expected, (settings, step, env, rlinf, ours[step][env])
        assert any(any(row) for row in ours)
