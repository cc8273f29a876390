"""HTTP Range requests (RFC 9110 section 14) on stored files.

One byte range per request, as browsers ask for video and large downloads: `bytes=first-last`, `bytes=first-`
and `bytes=-suffix`. A header that is malformed, names another unit or asks for several ranges is ignored (the
whole file is answered, as the RFC allows); a range starting past the end is unsatisfiable (416).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.utils.http import parse_http_date_safe

_SPEC = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)


class Unsatisfiable(Exception):
    """No byte of the file is in the range asked for: answer 416 with `Content-Range: bytes */<size>`."""


@dataclass(frozen=True)
class ByteRange:
    start: int
    end: int  # the last byte's offset (inclusive, as in Content-Range)

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end}/{size}"


@dataclass(frozen=True)
class RangeSpec:
    """One range as asked, before the file's size is known: `first`..`last` (None: to the end), or the last
    `suffix` bytes when `first` is None."""

    first: int | None
    last: int | None = None
    suffix: int | None = None

    def header(self) -> str:
        """The same range as a Range header (an object store's ranged GET takes it as is)."""
        if self.first is None:
            return f"bytes=-{self.suffix}"
        return f"bytes={self.first}-{'' if self.last is None else self.last}"

    def resolve(self, size: int) -> ByteRange:
        """The bytes of a `size`-byte file this range covers (clipped to the file); Unsatisfiable if none."""
        if self.first is None:
            if not self.suffix or size == 0:
                raise Unsatisfiable
            return ByteRange(max(0, size - self.suffix), size - 1)
        if self.first >= size:
            raise Unsatisfiable
        return ByteRange(self.first, size - 1 if self.last is None else min(self.last, size - 1))


def range_requested(header: str | None) -> RangeSpec | None:
    """The one range a Range header asks for; None to answer the whole file (no header, another unit, several
    ranges, or a malformed one such as `bytes=5-2`)."""
    if not header:
        return None
    match = _SPEC.match(header)
    if match is None:
        return None
    first, last = match.groups()
    if first:
        if last and int(last) < int(first):
            return None
        return RangeSpec(int(first), int(last) if last else None)
    if not last:
        return None  # "bytes=-"
    return RangeSpec(None, suffix=int(last))


def if_range_holds(header: str | None, *, etag: str | None, modified: float | None) -> bool:
    """Whether a Range may be honoured given the request's If-Range (RFC 9110 13.1.5): no If-Range, a strong
    entity tag equal to the file's, or a date equal to its last modification (to the second). Otherwise the
    client's partial copy is of another version and gets the whole file."""
    if not header:
        return True
    header = header.strip()
    if header.startswith(('"', "W/")):
        return etag is not None and not header.startswith("W/") and header == etag
    when = parse_http_date_safe(header)
    return when is not None and modified is not None and when == int(modified)
