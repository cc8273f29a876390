"""The inference worker reads stored payloads straight into buffers of their own. No Django.

redis-py's hiredis parser reads a large value 64 KB at a time into a buffer that grows by reallocation
(copying what it holds each time), then copies the whole value once more into a bytes object: for one
9.6 MB batch the worker spent most of its time in that read (py-spy, bench/serving_overhead.py).
`payloads_get` sends the MGET on a pooled connection and reads the reply itself: its short header lines
through a buffered reader, each value with `readinto` straight into a bytearray of the value's size (one
copy from the socket). A bytearray is writable, so numpy and torch take views of it, without a copy.
A reply cut short or not as expected drops the connection (its stream is at an unknown point) and raises.
"""

from __future__ import annotations

from io import BufferedReader
from typing import Any

from redis.exceptions import ConnectionError, ResponseError

MAX_LINE = 64 * 1024


def payloads_get(redis: Any, keys: list[str]) -> list[bytearray | None]:
    """The values of `keys` (None for a missing one), as MGET on `redis`'s pool, read without copies."""
    if not keys:
        return []
    pool = redis.connection_pool
    connection = pool.get_connection()
    try:
        connection.send_command("MGET", *keys)
        with connection._sock.makefile("rb", buffering=MAX_LINE) as stream:
            return _mget_reply(stream, len(keys))
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)


def _mget_reply(stream: BufferedReader, count: int) -> list[bytearray | None]:
    head = _line(stream)
    if head.startswith(b"-"):
        raise ResponseError(head[1:].decode(errors="replace"))
    if head != b"*%d" % count:
        raise ConnectionError(f"unexpected MGET reply from Redis: {head[:60]!r}")
    values: list[bytearray | None] = []
    for _ in range(count):
        line = _line(stream)
        if line in (b"$-1", b"_"):
            values.append(None)
            continue
        if not line.startswith(b"$") or not line[1:].isdigit():
            raise ConnectionError(f"unexpected MGET item from Redis: {line[:60]!r}")
        value = bytearray(int(line[1:]))
        view, got = memoryview(value), 0
        while got < len(value):
            n = stream.readinto(view[got:])
            if not n:
                raise ConnectionError("Redis closed the connection in the middle of a reply")
            got += n
        if stream.read(2) != b"\r\n":
            raise ConnectionError("a value from Redis did not end as RESP says")
        values.append(value)
    return values


def _line(stream: BufferedReader) -> bytes:
    line = stream.readline(MAX_LINE)
    if not line.endswith(b"\r\n"):
        raise ConnectionError("Redis closed the connection in the middle of a reply")
    return line[:-2]
