"""JSON read within a nesting depth: deeper text is refused before it is parsed. No Django.

Python's decoder recurses once per level: 5,000 nested brackets raise RecursionError (a server error where
the client sent bad input), and a few hundred levels that do parse crash whatever walks them next (a
serializer, msgpack, a JSON column). Every JSON parser of the app (DRF's, the fast paths', the WebSocket
consumers', the chunk headers) reads through `loads_bounded`, so such text gets a 400 naming the limit.

The depth is counted over the brackets outside strings, in C loops (escapes and strings cut out, then an
accumulate over what is left): a few ms a MiB, a fraction of what parsing it costs, and nothing is built
before the count is known.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

_ESCAPE = re.compile(rb"\\.", re.S)  # a backslash and the character it escapes (only strings hold them)
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'[]{}"')
_STRING = re.compile(rb'"[^"]*"')  # once escapes are gone, a string is a quote, anything but a quote, a quote
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


class JSONTooDeep(ValueError):
    """JSON nested deeper than the limit; the message names it."""


def json_depth(raw: bytes | bytearray | memoryview | str) -> int:
    """How deeply the arrays and objects of JSON text nest (0 for a scalar). Brackets inside strings do not
    count; text that is not JSON gets a number all the same (the parser refuses it next)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    if b"\\" in data:
        data = _ESCAPE.sub(b"", data)
    brackets = _STRING.sub(b"", data.translate(None, _NOT_STRUCTURE))
    if not brackets:
        return 0
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)))


def depth_check(raw: bytes | bytearray | memoryview | str, max_depth: int, what: str = "JSON") -> None:
    depth = json_depth(raw)
    if depth > max_depth:
        raise JSONTooDeep(f"{what} nests {depth} levels deep; the limit is {max_depth} (JSON_MAX_DEPTH)")


def loads_bounded(
    raw: bytes | bytearray | memoryview | str, *, max_depth: int, what: str = "JSON", **kwargs: Any
) -> Any:
    """`json.loads(raw, **kwargs)` for text nested at most `max_depth` levels. Raises JSONTooDeep, or what
    json.loads raises (json.JSONDecodeError, UnicodeDecodeError: both ValueErrors)."""
    depth_check(raw, max_depth, what)
    return json.loads(bytes(raw) if isinstance(raw, memoryview) else raw, **kwargs)


def size_of(value: Any) -> int:
    """Bytes of `value` as compact JSON (how a stored JSON field is measured)."""
    return len(json.dumps(value, separators=(",", ":"), default=str))
