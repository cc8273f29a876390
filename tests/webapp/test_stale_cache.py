"""The deployment settings cache serves stale values while one background load refreshes them."""

from __future__ import annotations

import pytest

from common.stale_cache import StaleCache


class World:
    """A fake clock, a fake table the loads read, and background jobs run only when the test says."""

    def __init__(self):
        self.now = 0.0
        self.table: dict[str, str] = {"a": "v1"}
        self.loads: list[str] = []
        self.jobs: list = []
        self.fail = False

    def load(self, key: str) -> str | None:
        self.loads.append(key)
        if self.fail:
            raise ConnectionError("database down")
        return self.table.get(key)

    def run_jobs(self) -> None:
        jobs = list(self.jobs)
        self.jobs.clear()
        for job in jobs:
            job()

    def cache(self) -> StaleCache[str, str]:
        return StaleCache(self.load, ttl_s=1.0, max_stale_s=10.0, background=self.jobs.append, clock=lambda: self.now)


@pytest.fixture
def world() -> World:
    return World()


def test_missing_and_too_old_values_are_loaded_by_the_caller(world):
    cache = world.cache()
    assert cache.get("a") == (False, None)
    cache.put("a", "v1")
    world.now = 10.0
    assert cache.get("a") == (False, None)
    assert world.jobs == [] and world.loads == []


def test_a_fresh_value_is_served_without_any_load(world):
    cache = world.cache()
    cache.put("a", "v1")
    world.now = 0.9
    assert cache.get("a") == (True, "v1")
    assert world.jobs == []


def test_a_stale_value_is_served_at_once_and_one_background_load_refreshes_it(world):
    cache = world.cache()
    cache.put("a", "v1")
    world.table["a"] = "v2"
    world.now = 1.5
    assert cache.get("a") == (True, "v1")
    assert cache.get("a") == (True, "v1")  # a refresh is already under way: no second one
    assert len(world.jobs) == 1 and world.loads == []
    world.run_jobs()
    assert world.loads == ["a"]
    assert cache.get("a") == (True, "v2")
    world.now = 2.4  # fresh for ttl_s from the refresh
    assert cache.get("a") == (True, "v2") and world.jobs == []


def test_a_background_load_that_finds_nothing_hands_the_next_caller_its_own_load(world):
    cache = world.cache()
    cache.put("a", "v1")
    del world.table["a"]
    world.now = 2.0
    cache.get("a")
    world.run_jobs()
    assert cache.get("a") == (False, None)


def test_a_failed_background_load_keeps_the_stale_value_and_is_tried_again(world):
    cache = world.cache()
    cache.put("a", "v1")
    world.now = 2.0
    world.fail = True
    cache.get("a")
    world.run_jobs()
    assert cache.get("a") == (True, "v1")
    assert len(world.jobs) == 1  # the next request starts another try
    world.fail = False
    world.table["a"] = "v3"
    world.run_jobs()
    assert cache.get("a") == (True, "v3")


def test_forget_wins_over_a_refresh_under_way(world):
    cache = world.cache()
    cache.put("a", "v1")
    world.now = 2.0
    cache.get("a")  # refresh queued, reading the table as it is when it runs
    cache.forget("a")  # a change made in this process
    world.run_jobs()
    assert cache.get("a") == (False, None)
    cache.put("a", "v9")  # the caller's own load
    world.run_jobs()
    assert cache.get("a") == (True, "v9")


def test_a_put_during_a_refresh_is_not_overwritten_by_it(world):
    cache = world.cache()
    cache.put("a", "v1")
    world.now = 2.0
    cache.get("a")
    cache.put("a", "newer")
    world.run_jobs()
    assert cache.get("a") == (True, "newer")
