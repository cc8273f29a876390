"""A binary teleop step (robot_agent.protocol) read into checked values, or a ProtocolError saying what is
wrong. No Django: the limits come in as arguments.

The header's nesting is checked before it is parsed, and every field the server uses (episode, index,
action, reward, flags, info, sent_at) is typed and bounded here, so that a bad value is a warning to the agent,
never an exception later in the recording, the broadcast (msgpack refuses integers past 64 bits) or the model.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field

from common.json_limits import JSONTooDeep, depth_check, size_of
from robot_agent.protocol import HEADER, MAX_HEADER, ProtocolError, unpack_step

MAX_STEP_INDEX = 2**31 - 1  # the database column's range
MAX_ACTION_SIZE = 1024


@dataclass(frozen=True)
class Step:
    episode: str  # a UUID, normalised
    index: int
    action: list[float] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    info: dict = field(default_factory=dict)
    sent_at: float | None = None
    formats: dict[str, str] = field(default_factory=dict)  # camera -> jpeg or png
    images: dict[str, bytes] = field(default_factory=dict)


def step_read(message: bytes, *, max_depth: int, max_info_bytes: int) -> Step:
    """The step in a binary message; ProtocolError naming the first bad field."""
    if len(message) >= HEADER.size:
        (size,) = HEADER.unpack_from(message)
        if size <= MAX_HEADER:
            try:
                depth_check(message[HEADER.size : HEADER.size + size], max_depth, "step header")
            except JSONTooDeep as exc:
                raise ProtocolError(str(exc)) from None
    header, images = unpack_step(message)
    index = header["index"]
    if isinstance(index, bool) or index > MAX_STEP_INDEX:
        raise ProtocolError(f"step index must be an integer from 0 to {MAX_STEP_INDEX}")
    label = f"step {index}"
    try:
        episode = str(uuid.UUID(str(header["episode"])))
    except ValueError:
        raise ProtocolError(f"{label}: episode must be a UUID") from None
    action = header.get("action") or []
    if not isinstance(action, list) or len(action) > MAX_ACTION_SIZE:
        raise ProtocolError(f"{label}: action must be a list of at most {MAX_ACTION_SIZE} numbers")
    info = header.get("info") or {}
    if not isinstance(info, dict):
        raise ProtocolError(f"{label}: info must be an object")
    info_bytes = size_of(info)
    if info_bytes > max_info_bytes:
        raise ProtocolError(
            f"{label}: info of {info_bytes} bytes; the limit is {max_info_bytes} (JSON_FIELD_MAX_BYTES)"
        )
    sent_at = header.get("sent_at")
    return Step(
        episode=episode,
        index=index,
        action=[_number(value, label, "action") for value in action],
        reward=_number(header.get("reward") or 0.0, label, "reward"),
        success=_flag(header.get("success"), label, "success"),
        terminated=_flag(header.get("terminated"), label, "terminated"),
        truncated=_flag(header.get("truncated"), label, "truncated"),
        info=info,
        sent_at=None if sent_at is None else _number(sent_at, label, "sent_at"),
        formats={str(item["camera"]): str(item.get("format", "jpeg")) for item in header.get("images") or []},
        images=images,
    )


def _number(value: object, label: str, name: str) -> float:
    if not isinstance(value, bool) and isinstance(value, (int, float)):
        try:
            if math.isfinite(value):
                return float(value)
        except OverflowError:  # an integer too large for a float
            pass
    raise ProtocolError(f"{label}: {name} must be a finite number")


def _flag(value: object, label: str, name: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    raise ProtocolError(f"{label}: {name} must be true or false")
