"""The demo's episode files and how their rendering is shared between worker processes, without Django or
a simulator (the demo command's test renders real episodes through the same path)."""

from __future__ import annotations

import numpy as np

from webapp.demo.episode_cache import (
    DemoEpisode,
    cache_path,
    demo_seeds,
    episode_load,
    episode_save,
    render_missing,
    render_shares,
    render_workers,
)


def test_every_third_episode_has_its_grasp_perturbed():
    assert demo_seeds(6, first_seed=10) == [(10, False), (11, False), (12, True), (13, False), (14, False), (15, True)]


def test_the_episodes_are_dealt_round_robin_so_each_worker_gets_its_share_of_failures():
    plan = demo_seeds(7)
    shares = render_shares(plan, 2)
    assert shares == [plan[0::2], plan[1::2]]
    assert sorted(e for share in shares for e in share) == sorted(plan)
    assert render_shares(plan[:1], 4) == [plan[:1]]  # no idle worker gets an empty share


def test_one_worker_per_cpu_and_never_more_than_episodes_to_render():
    assert render_workers(24, cpus=2) == 2
    assert render_workers(1, cpus=16) == 1
    assert render_workers(0, cpus=2) == 1


def test_an_episode_file_reads_back_as_written_and_is_keyed_by_size_seed_and_grasp(tmp_path):
    frames = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    episode = DemoEpisode(
        seed=7,
        perturbed=True,
        images={"main": frames, "extra": frames[::-1]},
        success=np.array([False, True]),
        reward=np.array([0.0, 1.0], np.float32),
        actions=np.zeros((2, 8), np.float32),
        cube_height=np.array([0.02, 0.05], np.float32),
        grasped=np.array([True, True]),
    )
    path = cache_path(tmp_path, 7, True, 4)
    assert path != cache_path(tmp_path, 7, False, 4) and path != cache_path(tmp_path, 7, True, 8)
    episode_save(path, episode)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary file left behind
    loaded = episode_load(path, 7, True)
    assert set(loaded.images) == {"main", "extra"}
    np.testing.assert_array_equal(loaded.images["extra"], frames[::-1])
    np.testing.assert_array_equal(loaded.cube_height, episode.cube_height)
    assert loaded.lift_step == 1


def test_nothing_is_rendered_when_every_episode_is_cached(tmp_path):
    plan = demo_seeds(2)
    for seed, perturbed in plan:
        path = cache_path(tmp_path, seed, perturbed, 8)
        path.write_bytes(b"")  # present: no simulator is started (none could be, from these bytes)
    calls: list[tuple[int, int, str]] = []
    render_missing(tmp_path, plan, size=8, workers=2, progress=lambda *args: calls.append(args))
    assert calls == []
