"""A real zip bomb, built in a fraction of a second: members of gigabytes of zeros whose deflate stream is one
compressed MiB block repeated (each block ends with a full flush, so its bytes are the same every time)."""

from __future__ import annotations

import functools
import struct
import zlib

MIB = 1 << 20


@functools.lru_cache(maxsize=4)
def _zeros_member(mib: int) -> tuple[bytes, int]:
    """The raw deflate stream of `mib` MiB of zeros, and their CRC-32."""
    block = bytes(MIB)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(block, crc)
    return piece * mib + deflate.flush(), crc


def zip_bomb(members: int = 2, mib: int = 2100) -> bytes:
    """A zip of `members` entries (`zero_<i>.pkl`) of `mib` MiB of zeros each (under 4 GiB each: no zip64),
    about 1 KB per MiB."""
    data, crc = _zeros_member(mib)
    size = mib * MIB
    local, central = b"", b""
    for i in range(members):
        name = f"zero_{i}.pkl".encode()
        offset = len(local)
        fields = struct.pack("<HHHHHIIIHH", 20, 0, 8, 0, 0x21, crc, len(data), size, len(name), 0)
        local += b"PK\x03\x04" + fields + name + data
        central += b"PK\x01\x02" + struct.pack("<H", 20) + fields + struct.pack("<HHHII", 0, 0, 0, 0, offset) + name
    end = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, members, members, len(central), len(local), 0)
    return local + central + end
