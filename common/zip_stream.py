"""A folder zipped as it is sent: blocks of about 1 MiB, no copy on disk, the first bytes out at once, whatever
the folder's size (a snapshot of a million frames, a model's checkpoint). No Django."""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

BLOCK_BYTES = 1 << 20


class _ZipSink(io.RawIOBase):
    """Where zipfile writes a streamed archive: collects the bytes until the caller takes them."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.pending = self._written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._parts.append(bytes(data))
        self.pending += len(data)
        self._written += len(data)
        return len(data)

    def tell(self) -> int:
        return self._written

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        self.pending = 0
        return out


def files_as_walked(folder: Path) -> Iterator[Path]:
    """The folder's files, each folder's own files (sorted) before its subfolders: listed as the walk goes, so
    the first bytes go out before the last of 100,000 frame files has been listed."""
    for current, subfolders, files in os.walk(folder):
        subfolders.sort()
        for name in sorted(files):
            yield Path(current) / name


def zip_folder_blocks(folder: Path, root: str, extra: Mapping[str, bytes] | None = None) -> Iterator[bytes]:
    """`folder`'s files under `root/` in a stored (uncompressed) zip, then `extra`'s members (name relative to
    `root` -> bytes, e.g. a generated config), as blocks of about BLOCK_BYTES."""
    sink = _ZipSink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for path in files_as_walked(folder):
            info = zipfile.ZipInfo.from_file(path, f"{root}/{path.relative_to(folder)}")
            with path.open("rb") as source, zf.open(info, "w") as target:
                while block := source.read(BLOCK_BYTES):
                    target.write(block)
                    if sink.pending >= BLOCK_BYTES:
                        yield sink.take()
        for name, data in (extra or {}).items():
            zf.writestr(f"{root}/{name}", data)
            if sink.pending >= BLOCK_BYTES:
                yield sink.take()
    if sink.pending:
        yield sink.take()
