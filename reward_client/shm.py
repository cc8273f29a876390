"""Same-host frames for RewardClient: one shared-memory file (a Linux memfd) the client writes its batches into,
so a request to a server on this machine carries a small descriptor instead of the pixels.

The memfd has no name in any file system and the kernel frees it with the last descriptor or mapping of it,
so a client that exits, crashes or is killed (`kill -9`, mid-request included) leaves nothing behind: there
is nothing in /dev/shm to clean up, and no tracker process to trust. The server opens it through
`/proc/<pid>/fd/<fd>` (the same user as the client may) and maps it, keeping the mapping while the segment
lives: the segment is sealed against shrinking (F_SEAL_SHRINK), so the server's mapping can never fault.
Only numpy and the standard library.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import secrets
import weakref
from typing import Any

import numpy as np

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def local_boot_id() -> str:
    try:
        with open(BOOT_ID_PATH) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def shm_supported() -> bool:
    """Whether this machine can make the segments (Linux memfds)."""
    return hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


def _release(fd: int, mapped: mmap.mmap) -> None:
    with contextlib.suppress(BufferError):  # a view of it is still alive: the mapping goes with it
        mapped.close()
    os.close(fd)


class SharedFrames:
    """One memfd named `rs-<key>-<random>`, grown (replaced) when a batch does not fit.

    `write(array)` copies a uint8 [B,H,W,3] batch in and returns its descriptor; `view(shape)` hands out the
    segment's memory to write frames into in place (then `descriptor(shape)` needs no copy at all)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.name = ""
        self.size = 0
        self._fd = -1
        self._map: mmap.mmap | None = None
        self._pid = os.getpid()
        self._finalizer: Any = None

    def _ensure(self, nbytes: int) -> mmap.mmap:
        if self._pid != os.getpid():  # a forked child must not share its parent's frames
            self._map, self._fd, self.size, self._finalizer, self._pid = None, -1, 0, None, os.getpid()
        if self._map is not None and nbytes <= self.size:
            return self._map
        self.close()
        size = 1 << max(16, (max(nbytes, 1) - 1).bit_length())  # powers of two: few regrowths
        self.name = f"rs-{self.key}-{secrets.token_hex(16)}"
        fd = os.memfd_create(self.name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)  # the server maps it: it may never shrink
            mapped = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._map, self.size = fd, mapped, size
        self._finalizer = weakref.finalize(self, _release, fd, mapped)
        return mapped

    def view(self, shape: tuple[int, ...]) -> np.ndarray:
        """A writable uint8 array of `shape` in the segment (its contents are what the next request sends)."""
        mapped = self._ensure(int(np.prod(shape)))
        return np.frombuffer(mapped, dtype=np.uint8, count=int(np.prod(shape))).reshape(shape)

    def holds(self, array: np.ndarray) -> bool:
        """Whether `array` is this segment's memory from its start, C-ordered (so nothing needs copying)."""
        if self._map is None or self._pid != os.getpid() or not array.flags.c_contiguous:
            return False
        start = np.frombuffer(self._map, dtype=np.uint8, count=1)
        return array.__array_interface__["data"][0] == start.__array_interface__["data"][0]

    def write(self, array: np.ndarray) -> dict:
        """Copy the batch into the segment; its descriptor."""
        if not self.holds(array):
            np.copyto(self.view(array.shape), array)
        return self.descriptor(array.shape)

    def descriptor(self, shape: tuple[int, ...]) -> dict:
        return {
            "pid": os.getpid(),
            "fd": self._fd,
            "name": self.name,
            "offset": 0,
            "shape": [int(v) for v in shape],
            "dtype": "uint8",
        }

    def close(self) -> None:
        """Give the memory back (the kernel does the same when the process ends)."""
        if self._finalizer is not None:
            self._finalizer()
        self._map, self._fd, self.size, self._finalizer = None, -1, 0, None
