"""The deployment page's note of chat requests whose task text differs from the trained one, kept in Redis.

A run sends the same text on every step, so each web process writes at most once per NOTE_EVERY_S per
deployment (sooner when the text changes), adding the requests it counted meanwhile: one Redis round trip per
few seconds, not per request. The count is a floor (a process's last few seconds may be unwritten)."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from redis.exceptions import RedisError

from ..serving import sync_redis
from .chat_prompt import PromptPick

log = logging.getLogger(__name__)

PREFIX = "rs:inf:prompt:"
NOTE_EVERY_S = 5.0
NOTE_TTL_S = 7 * 24 * 3600
MAX_TEXT = 500

_lock = threading.Lock()
_pending: dict[int, tuple[float, str, int]] = {}  # deployment id -> (last write, text written, requests unwritten)


def prompt_mismatch_note(deployment_id: int, pick: PromptPick, *, now: float | None = None) -> None:
    """Count a request whose text differs from the trained prompt; never fails the request."""
    if not pick.differs:
        return
    now = time.monotonic() if now is None else now
    text = pick.request_text[:MAX_TEXT]
    with _lock:
        written_at, written, unwritten = _pending.get(deployment_id, (float("-inf"), "", 0))
        unwritten += 1
        if now - written_at < NOTE_EVERY_S and text == written:
            _pending[deployment_id] = (written_at, written, unwritten)
            return
        _pending[deployment_id] = (now, text, 0)
    key = f"{PREFIX}{deployment_id}"
    fields = {
        "text": text,
        "task": pick.request_task or "",
        "judged_with": pick.judged_with,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    try:
        pipe = sync_redis().pipeline(transaction=False)
        pipe.hset(key, mapping=fields)
        pipe.hincrby(key, "count", unwritten)
        pipe.expire(key, NOTE_TTL_S)
        pipe.execute()
    except RedisError as exc:  # the note is advisory: the reward is answered regardless
        log.warning("prompt mismatch note for deployment %s not written: %s", deployment_id, exc)


def prompt_mismatch_notes(deployment_ids: list[int]) -> dict[int, dict[str, str]]:
    """Each deployment's last differing request (text, task, judged_with, at, count); absent when none."""
    if not deployment_ids:
        return {}
    try:
        pipe = sync_redis().pipeline(transaction=False)
        for pk in deployment_ids:
            pipe.hgetall(f"{PREFIX}{pk}")
        rows = pipe.execute()
    except RedisError as exc:
        log.warning("prompt mismatch notes unreadable: %s", exc)
        return {}
    return {
        pk: {
            k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v for k, v in row.items()
        }
        for pk, row in zip(deployment_ids, rows, strict=True)
        if row
    }


def forget_prompt_notes() -> None:
    """Tests: this process's write throttle starts afresh."""
    with _lock:
        _pending.clear()
