"""The machine-local cache: bounded, least recently used first, shared safely by two processes."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from common.filestore.cache import FileCache, entry_key


def _loader(size: int, calls: list[str] | None = None, delay: float = 0.0):
    def load(name: str, target: Path) -> None:
        if calls is not None:
            calls.append(name)
        time.sleep(delay)
        target.write_bytes(name.encode()[:1] * size)

    return load


def test_a_fetched_name_is_loaded_once_and_read_from_the_cache_after(tmp_path):
    cache, calls = FileCache(tmp_path, max_bytes=1000), []
    first = cache.fetch("frames/a.png", _loader(10, calls))
    again = cache.fetch("frames/a.png", _loader(10, calls))
    assert first == again and first.read_bytes() == b"f" * 10
    assert calls == ["frames/a.png"]


def test_the_cache_stays_within_its_bound_dropping_the_least_recently_used(tmp_path):
    cache = FileCache(tmp_path, max_bytes=250)
    for name in ("a", "b"):
        cache.fetch(name, _loader(100))
    for name, used in (("a", 1), ("b", 2)):  # "a" used first, then "b"
        os.utime(tmp_path / "entries" / entry_key(name) / "meta.json", (used, used))
    cache.fetch("c", _loader(100))
    assert sorted(e.name for e in cache.entries()) == ["b", "c"]
    assert cache.total_bytes() == 200 <= cache.max_bytes


def test_an_entry_in_use_is_not_evicted(tmp_path):
    cache = FileCache(tmp_path, max_bytes=150)
    with cache.held("snapshot", _loader(100)) as path:
        cache.fetch("other", _loader(100))  # over the bound: only "other" itself could go, and it is new
        assert path.exists()
        assert {e.name for e in cache.entries()} == {"snapshot", "other"}
    cache.fetch("third", _loader(100))
    assert {e.name for e in cache.entries()} == {"third"}


def test_a_failed_fetch_leaves_no_entry(tmp_path):
    cache = FileCache(tmp_path, max_bytes=1000)

    def broken(name: str, target: Path) -> None:
        target.write_bytes(b"half")
        raise ConnectionError("store gone")

    with pytest.raises(ConnectionError):
        cache.fetch("model", broken)
    assert cache.entries() == [] and list((tmp_path / "tmp").iterdir()) == []
    assert cache.fetch("model", _loader(3)).read_bytes() == b"mmm"


def _fetch_in_child(root: str, log: str, ready) -> None:
    def load(name: str, target: Path) -> None:
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # the other process asks meanwhile
        target.mkdir()
        (target / "model.safetensors").write_bytes(b"w" * 64)

    ready.wait()
    path = FileCache(Path(root), max_bytes=10_000).fetch("checkpoints/job_1/best", load)
    assert (path / "model.safetensors").read_bytes() == b"w" * 64


def test_two_processes_asking_at_once_fetch_once_and_share_the_entry(tmp_path):
    context = multiprocessing.get_context("spawn")
    ready, log = context.Event(), tmp_path / "loads.txt"
    children = [context.Process(target=_fetch_in_child, args=(str(tmp_path / "c"), str(log), ready)) for _ in "ab"]
    for child in children:
        child.start()
    ready.set()
    for child in children:
        child.join(timeout=60)
    assert [child.exitcode for child in children] == [0, 0]
    assert len(log.read_text().split()) == 1  # one download; the second process reused it
    assert [e.name for e in FileCache(tmp_path / "c", max_bytes=10_000).entries()] == ["checkpoints/job_1/best"]


def test_a_hit_does_not_wait_for_another_processs_eviction_and_a_fill_does(tmp_path):
    cache = FileCache(tmp_path, max_bytes=1000)
    cache.fetch("snapshots/p1/snapshot_1", _loader(10))
    done: list[str] = []

    def ask(name: str) -> None:
        cache.fetch(name, _loader(10))
        done.append(name)

    with open(tmp_path / ".lock", "a+b") as evicting:  # another process holds the cache-wide lock
        fcntl.flock(evicting, fcntl.LOCK_EX)
        hit = threading.Thread(target=ask, args=("snapshots/p1/snapshot_1",))
        hit.start()
        hit.join(timeout=10)
        assert done == ["snapshots/p1/snapshot_1"]  # a warm start: its entry's lock, a utime, nothing else
        fill = threading.Thread(target=ask, args=("checkpoints/job_1/best",))
        fill.start()
        fill.join(timeout=0.5)
        assert fill.is_alive()  # a new entry makes room under the cache-wide lock
    fill.join(timeout=10)
    assert done == ["snapshots/p1/snapshot_1", "checkpoints/job_1/best"]
