"""Same-host frames: a reward request names frames in the client's memory instead of carrying them. No Django.

When the RL worker runs on the machine of the web process and the inference worker, it writes its uint8
[B,H,W,3] batch into a memfd (an anonymous shared-memory file, `os.memfd_create`) named
`rs-<client key>-<random>` and sends only a descriptor (`application/x-rs-shm`, a small JSON object):

    {"pid": 4242, "fd": 7, "name": "rs-0123456789abcdef-<32 hex>", "offset": 0, "shape": [64, 128, 128, 3],
     "dtype": "uint8"}

The web process checks it (`descriptor_parse` then `segment_check`: the shape within the limits of an
`.npy` body, the file `/proc/<pid>/fd/<fd>` a memfd of exactly that name, sealed against shrinking
(F_SEAL_SHRINK), its size holding offset + bytes), so a bad descriptor is a 4xx before anything is queued.
The inference worker maps the segment read-only (`SegmentMaps`, MAP_POPULATE: the page tables are filled
by the kernel at once), keeps the mapping while the client holds the segment (one per client, checked
before each use and each second), and scores the frames where they are, with no copy; the seal is what
makes this safe: a file that can never shrink cannot SIGBUS a process that maps it. Where the web process
needs pixels itself it reads them with `preadv` (`segment_read`), opening the file for that request only.

Cleanup needs nobody: a memfd has no name in any file system, and the kernel frees it when the last
descriptor and mapping are gone, so a client killed with `kill -9` (mid-request included) leaves nothing in
/dev/shm or anywhere else (the worker's mapping of it goes at its next sweep, within a second). Ownership: the name carries the client's key (an HMAC of who asks, made with
the server's secret and told to the client by `GET /api/shm`), so a descriptor naming another client's
memfd is refused; reading `/proc/<pid>/fd/<fd>` needs the same user as the client (the kernel's ptrace
rule), which keeps other users' processes out.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import math
import mmap
import os
import re
import stat
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from inference.wire.payloads import MAX_ITEMS, PayloadError, PayloadTooLarge, check_shape

MEDIA_TYPE = "application/x-rs-shm"
MAX_DESCRIPTOR_BYTES = 4096
NAME_PREFIX = "rs-"
_NAME = re.compile(r"^rs-(?P<key>[0-9a-f]{16})-[0-9a-f]{32}$")
_FIELDS = {"pid", "fd", "name", "offset", "shape", "dtype"}
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


UNUSABLE = "shared memory: "  # how every SegmentError's message starts: the client falls back to HTTP on it


class SegmentError(PayloadError):
    """The descriptor names no segment this server may use (a 400; its message starts with UNUSABLE, on which
    the client goes on over HTTP)."""

    def __init__(self, message: str):
        super().__init__(UNUSABLE + message)


@dataclass(frozen=True)
class ShmDescriptor:
    pid: int
    fd: int
    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: str = "uint8"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape)

    @property
    def path(self) -> str:
        return f"/proc/{self.pid}/fd/{self.fd}"

    def to_header(self) -> dict:
        return {**asdict(self), "shape": list(self.shape)}

    @classmethod
    def from_header(cls, data: dict) -> ShmDescriptor:
        return cls(
            pid=int(data["pid"]),
            fd=int(data["fd"]),
            name=str(data["name"]),
            offset=int(data["offset"]),
            shape=tuple(int(v) for v in data["shape"]),
            dtype=str(data.get("dtype", "uint8")),
        )


def client_key(secret: str | bytes, client: str) -> str:
    """The 16 hex digits a client's segment names carry: an HMAC of who asks ("a12", "n10.0.0.5")."""
    raw = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(raw, f"rs-shm:{client}".encode(), hashlib.sha256).hexdigest()[:16]


def boot_id() -> str:
    """This machine's boot id (the same in every process and container of one booted kernel)."""
    path = Path(BOOT_ID_PATH)
    return path.read_text().strip() if path.is_file() else ""


def _int(data: dict, field: str, low: int, high: int) -> int:
    value = data.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PayloadError(f"descriptor field {field!r} must be an integer from {low} to {high}, got {value!r}")
    return value


def descriptor_parse(
    body: bytes, *, key: str, max_side: int, max_request_pixels: int, max_items: int = MAX_ITEMS
) -> ShmDescriptor:
    """The descriptor of a request body, checked against the limits of an `.npy` body and the caller's key.
    Raises PayloadError (400) or PayloadTooLarge (413) saying what is wrong."""
    if len(body) > MAX_DESCRIPTOR_BYTES:
        raise PayloadTooLarge(f"a shared-memory descriptor is at most {MAX_DESCRIPTOR_BYTES} bytes")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise PayloadError("the body must be a JSON shared-memory descriptor") from None
    if not isinstance(data, dict) or not set(data) <= _FIELDS or not {"pid", "fd", "name", "shape"} <= set(data):
        raise PayloadError(f"a shared-memory descriptor is an object with {', '.join(sorted(_FIELDS))}")
    if data.get("dtype", "uint8") != "uint8":
        raise PayloadError(f"images must be uint8, got {data.get('dtype')!r}")
    name = data["name"]
    match = _NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise PayloadError("descriptor field 'name' must be rs-<your key>-<32 hex digits> (GET /api/shm tells the key)")
    if not hmac.compare_digest(match["key"], key):
        raise SegmentError("the segment's name does not carry this client's key (GET /api/shm tells it)")
    shape = data["shape"]
    if not isinstance(shape, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in shape):
        raise PayloadError(f"descriptor field 'shape' must be a list of integers, got {shape!r}")
    check_shape(shape, max_side=max_side, max_items=max_items)
    if math.prod(shape[:3]) > max_request_pixels:
        raise PayloadTooLarge(
            f"{shape[0]} images of {shape[2]}x{shape[1]} are more than {max_request_pixels} pixels (MAX_REQUEST_PIXELS)"
        )
    return ShmDescriptor(
        pid=_int(data, "pid", 1, 2**31 - 1),
        fd=_int(data, "fd", 0, 2**31 - 1),
        name=name,
        offset=_int(data, "offset", 0, 2**62) if "offset" in data else 0,
        shape=tuple(shape),
    )


def _open(descriptor: ShmDescriptor) -> int:
    """An fd of the client's memfd, checked: the name it was made with, a regular file holding the frames."""
    try:
        fd = os.open(descriptor.path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SegmentError(
            f"no segment {descriptor.name!r} at {descriptor.path} on this host: is the client on this machine "
            "(and in this PID namespace)? Send the frames over HTTP instead"
        ) from None
    except PermissionError:
        raise SegmentError(
            f"cannot open {descriptor.path}: the client runs as another user than this server; send the frames "
            "over HTTP instead"
        ) from None
    except OSError as exc:  # e.g. ENXIO: that descriptor is a socket now
        raise SegmentError(f"{descriptor.path} is not the segment {descriptor.name!r} ({exc.strerror})") from None
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")  # what was opened, not what the path named a moment before
        if target != f"/memfd:{descriptor.name} (deleted)":
            raise SegmentError(f"{descriptor.path} is not the segment {descriptor.name!r}")
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SegmentError(f"segment {descriptor.name!r} is not a memory file")
        if not fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK:
            raise SegmentError(
                f"segment {descriptor.name!r} is not sealed against shrinking (fcntl F_ADD_SEALS, F_SEAL_SHRINK)"
            )
        if info.st_size < descriptor.offset + descriptor.nbytes:
            raise SegmentError(
                f"segment {descriptor.name!r} holds {info.st_size} bytes; offset {descriptor.offset} plus shape "
                f"{list(descriptor.shape)} needs {descriptor.offset + descriptor.nbytes}"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def segment_check(descriptor: ShmDescriptor) -> None:
    """Raise SegmentError unless the descriptor names a readable segment large enough (the web side)."""
    os.close(_open(descriptor))


class SegmentMaps:
    """The inference worker's read-only mappings of clients' segments, kept while their clients hold them.

        Mapping a segment costs page-table work in proportion to its size (MAP_POPULATE: about one memory
        copy's time); a client reuses its segment for every batch, so the mapping is made once and reused. Each
        use checks first that `/proc/<pid>/fd/<fd>` still is that memfd (its name and inode: ten microseconds),
        `sweep` (the worker, every second) drops the mappings of clients that closed their segment or died (each
    kept mapping also holds a descriptor of the segment: CPython's mmap keeps a dup of the file), and
        at most `capacity` are kept (least recently used first out): a dead client's memory is freed within a
        second. The seal against shrinking makes a kept mapping as safe as a fresh one."""

    def __init__(self, capacity: int = 32) -> None:
        self.capacity = capacity
        self._maps: OrderedDict[tuple[int, int, str], tuple[int, mmap.mmap]] = OrderedDict()

    def array(self, descriptor: ShmDescriptor) -> np.ndarray:
        """The frames where they are: a read-only array over the segment's mapping (no copy)."""
        key = (descriptor.pid, descriptor.fd, descriptor.name)
        found = self._maps.get(key)
        end = descriptor.offset + descriptor.nbytes
        if found is not None and len(found[1]) >= end and _still(key, found[0]):
            self._maps.move_to_end(key)
            mapped = found[1]
        else:
            self._drop(key)
            fd = _open(descriptor)  # every check, as the web process made them
            try:
                info = os.fstat(fd)
                mapped = mmap.mmap(fd, info.st_size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            self._maps[key] = (info.st_ino, mapped)
            while len(self._maps) > self.capacity:
                self._drop(next(iter(self._maps)))
        array = np.frombuffer(mapped, dtype=np.uint8, count=descriptor.nbytes, offset=descriptor.offset)
        return array.reshape(descriptor.shape)

    def sweep(self) -> int:
        """Drop the mappings whose clients closed their segment or died; how many were dropped."""
        gone = [key for key, (inode, _) in self._maps.items() if not _still(key, inode)]
        for key in gone:
            self._drop(key)
        return len(gone)

    def __len__(self) -> int:
        return len(self._maps)

    def _drop(self, key: tuple[int, int, str]) -> None:
        entry = self._maps.pop(key, None)
        if entry is not None:
            with contextlib.suppress(BufferError):  # a request's array still uses it: unmapped when that goes
                entry[1].close()


def _still(key: tuple[int, int, str], inode: int) -> bool:
    """Whether `/proc/<pid>/fd/<fd>` is still the memfd of that name and inode."""
    pid, fd, name = key
    path = f"/proc/{pid}/fd/{fd}"
    try:
        return os.readlink(path) == f"/memfd:{name} (deleted)" and os.stat(path).st_ino == inode
    except OSError:
        return False


segment_maps = SegmentMaps()  # the inference worker's (one per process)


def segment_read(descriptor: ShmDescriptor, indices: list[int] | None = None) -> np.ndarray:
    """The frames (or those at `indices`), copied once into a new array by the kernel (`preadv`). Raises
    SegmentError when the segment is gone or shorter than the descriptor says."""
    fd = _open(descriptor)
    try:
        frame = math.prod(descriptor.shape[1:])
        picks = list(range(descriptor.shape[0])) if indices is None else indices
        out = np.empty((len(picks), *descriptor.shape[1:]), dtype=np.uint8)
        flat = out.reshape(len(picks), frame)
        runs = _runs(picks)
        row = 0
        for first, count in runs:
            _pread_full(fd, flat[row : row + count].data.cast("B"), descriptor.offset + first * frame)
            row += count
        return out
    finally:
        os.close(fd)


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Consecutive indices as (first, count) runs, so a whole batch is one read."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def _pread_full(fd: int, into: memoryview, offset: int) -> None:
    done = 0
    while done < len(into):
        got = os.preadv(fd, [into[done : done + (1 << 30)]], offset + done)
        if got <= 0:
            raise SegmentError("the segment became shorter than its descriptor while it was read")
        done += got
