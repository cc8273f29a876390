"""A size-bounded cache of stored files and folders on this machine's disk; no Django.

Layout under `root`: `entries/<key>/data` (the file or folder) with `entries/<key>/meta.json` (its name and
size; its modification time is the entry's last use), `locks/<key>.lock`, `tmp/` and `.lock`.

Two processes on one machine share it safely:
- an entry is fetched under its own exclusive file lock into `tmp/` and renamed into `entries/` in one step,
  so a reader sees a whole entry or none, and a second process asking for the same name waits and reuses it;
- a process using an entry holds its lock shared (`held`), and eviction (under `.lock`) removes only the
  entries it can lock exclusively at once, least recently used first, until the cache is within `max_bytes`.
  It runs after each fill; a hit (a warm start) costs its lock, one `utime` and nothing else: no listing, no
  hashing, no copy, no request.
An entry in use is never evicted, so the cache may pass its bound while one larger than it is held.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

Loader = Callable[[str, Path], None]  # (stored name, target path to create: a file or a folder)
STALE_TMP_SECONDS = 3600


def entry_key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:32]


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass(frozen=True)
class Entry:
    key: str
    name: str
    bytes: int
    used: float


class FileCache:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        for folder in ("entries", "locks", "tmp"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)

    def fetch(self, name: str, load: Loader) -> Path:
        """The local copy of stored `name`, fetched with `load` when missing. Not held: a long use should
        go through `held`, or another process's eviction may remove it meanwhile."""
        with self.held(name, load) as path:
            return path

    @contextlib.contextmanager
    def held(self, name: str, load: Loader) -> Iterator[Path]:
        """The local copy of `name`, kept from eviction until the block ends."""
        key = entry_key(name)
        with open(self.root / "locks" / f"{key}.lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entry = self.root / "entries" / key
            meta = entry / "meta.json"
            try:
                os.utime(meta)  # a hit: its last use is now; nothing else (the cache grew by nothing)
                filled = False
            except FileNotFoundError:
                self._fill(entry, name, load)
                filled = True
            fcntl.flock(lock, fcntl.LOCK_SH)  # others may read it too; nobody evicts it
            if filled:
                self.evict(protect={key})
            yield entry / "data"

    def _fill(self, entry: Path, name: str, load: Loader) -> None:
        staging = Path(tempfile.mkdtemp(dir=self.root / "tmp", prefix="fetch-"))
        try:
            load(name, staging / "data")
            size = tree_bytes(staging / "data")
            (staging / "meta.json").write_text(json.dumps({"name": name, "bytes": size}))
            shutil.rmtree(entry, ignore_errors=True)  # a leftover without meta.json (never complete)
            os.rename(staging, entry)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def entries(self) -> list[Entry]:
        out = []
        for entry in (self.root / "entries").iterdir():
            try:
                meta = entry / "meta.json"
                data = json.loads(meta.read_text())
                out.append(Entry(entry.name, str(data["name"]), int(data["bytes"]), meta.stat().st_mtime))
            except (OSError, ValueError, KeyError):
                continue  # being removed, or never complete
        return sorted(out, key=lambda e: e.used)

    def total_bytes(self) -> int:
        return sum(e.bytes for e in self.entries())

    def evict(self, *, protect: Collection[str] = ()) -> list[str]:
        """Remove least recently used entries not in use until within the bound; the names removed."""
        removed: list[str] = []
        with open(self.root / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._sweep_tmp()
            entries = self.entries()
            total = sum(e.bytes for e in entries)
            for entry in entries:
                if total <= self.max_bytes:
                    break
                if entry.key in protect or not self._remove(entry.key):
                    continue
                total -= entry.bytes
                removed.append(entry.name)
        return removed

    def drop(self, name: str) -> None:
        """Remove the entries of `name` and of the names below it (a stored folder deleted)."""
        for entry in self.entries():
            if entry.name == name or entry.name.startswith(name.rstrip("/") + "/"):
                self._remove(entry.key)

    def _remove(self, key: str) -> bool:
        with open(self.root / "locks" / f"{key}.lock", "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # in use (or being fetched) by some process
            trash = self.root / "tmp" / f"evicted-{uuid.uuid4().hex}"
            try:
                os.rename(self.root / "entries" / key, trash)
            except FileNotFoundError:
                return False
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def _sweep_tmp(self) -> None:
        """Staging folders of fetches killed half-way."""
        cutoff = time.time() - STALE_TMP_SECONDS
        for path in (self.root / "tmp").iterdir():
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < cutoff:
                    shutil.rmtree(path, ignore_errors=True)
