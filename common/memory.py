"""Memory a long-lived worker process hands back to the OS, and a per-task memory budget (no Django).

glibc keeps freed memory in its heap: after a 12 MiB decode buffer is freed, its sliding mmap threshold
rises past 12 MiB and later buffers of that size come from the heap, which rarely shrinks. A label-queue
recompute of 400 2048x2048 frames kept +3.0 GiB in a Celery worker that way. `allocator_setup` fixes
the threshold (glibc's M_MMAP_THRESHOLD, what the `MALLOC_MMAP_THRESHOLD_` environment variable sets):
allocations at least that large get their own mapping, unmapped when freed. `malloc_trim` returns what
the heap holds free (run after each task). `MemoryBudget` fails a task that grows its process by more
than its budget, naming the setting. On a C library without these calls (musl, macOS) they do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass, field

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MIB = 1024 * 1024


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def allocator_setup(mmap_threshold: int) -> bool:
    """Give allocations of at least `mmap_threshold` bytes their own mapping (returned to the OS when freed);
    whether it was set (0, or no glibc: left as it is)."""
    libc = _glibc()
    if libc is None or mmap_threshold <= 0:
        return False
    return bool(libc.mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(mmap_threshold)))


def malloc_trim() -> bool:
    """Hand the free memory of the C heap back to the OS; whether any was returned."""
    libc = _glibc()
    return bool(libc.malloc_trim(ctypes.c_size_t(0))) if libc is not None else False


def rss_bytes(pid: int | None = None) -> int:
    """Resident memory of a process (this one by default), from /proc; 0 where /proc is missing."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class MemoryBudgetExceeded(RuntimeError):
    """A task grew its process by more than its budget; the message names the task and the setting."""


@dataclass
class MemoryBudget:
    """How much a task may grow its process's resident memory over what it was at the budget's start.
    `check` (call it after each batch of work) trims the C heap once the growth passes the budget and raises
    MemoryBudgetExceeded when it is still over; `peak` is the largest growth seen at a check."""

    limit_bytes: int
    task: str
    setting: str = "TASK_MEMORY_BUDGET_MB"
    start: int = field(default_factory=rss_bytes)
    peak: int = 0

    def check(self) -> int:
        """The growth so far (bytes); MemoryBudgetExceeded beyond the budget."""
        grown = rss_bytes() - self.start
        if grown > self.limit_bytes:
            malloc_trim()
            grown = rss_bytes() - self.start
        self.peak = max(self.peak, grown)
        if grown > self.limit_bytes:
            raise MemoryBudgetExceeded(
                f"{self.task} grew its worker by {grown // MIB} MiB, over its budget of "
                f"{self.limit_bytes // MIB} MiB ({self.setting})"
            )
        return grown
