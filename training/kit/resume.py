"""Resume checkpoints for training loops (no Django): one `state.pt` per job, written atomically.

A loop saves everything it needs to go on exactly where it stopped (weights, optimiser and scheduler
state, epoch and step, position in the epoch, RNG states, best metric so far) every `every_seconds`
and at each epoch end. A job whose worker died is requeued and its next run loads this file and skips
the work already done. The file holds only tensors, numbers, strings, lists and dicts, so it is read
back with `torch.load(weights_only=True)` (no code runs on load).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

RESUME_DIR = "resume"
STATE_FILE = "state.pt"
FORMAT_VERSION = 1


def state_path(out_dir: str | os.PathLike) -> Path:
    return Path(out_dir) / RESUME_DIR / STATE_FILE


def state_save(out_dir: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write to a temporary name, then rename: a worker killed mid-write leaves the previous state intact."""
    path = state_path(out_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"format_version": FORMAT_VERSION, **state}, tmp)
    os.replace(tmp, path)
    return path


def state_load(out_dir: str | os.PathLike, *, config: dict[str, Any]) -> dict[str, Any] | None:
    """The saved state, or None when there is none or it belongs to another config (then start afresh)."""
    path = state_path(out_dir)
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("format_version") != FORMAT_VERSION or state.get("config") != config:
        return None
    return state


def state_clear(out_dir: str | os.PathLike) -> None:
    """The job is done: its state goes, and the folder it was in with it (the checkpoint folder holds the model)."""
    path = state_path(out_dir)
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".tmp").unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # absent, or holding something else: leave it
        path.parent.rmdir()


class CheckpointClock:
    """Says when a mid-epoch resume checkpoint is due (every `every_seconds`; 0 turns them off)."""

    def __init__(self, every_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_seconds = every_seconds
        self._clock = clock
        self._last = clock()

    def due(self) -> bool:
        return self.every_seconds > 0 and self._clock() - self._last >= self.every_seconds

    def reset(self) -> None:
        self._last = self._clock()


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def rng_restore(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
