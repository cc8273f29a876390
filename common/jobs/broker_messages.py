"""Which task messages wait in a Celery queue on the Redis broker (no Django).

Kombu's Redis transport keeps a queue as a list under the queue's name (and, for priorities other than
0, under `<name>\\x06\\x16<priority>`); each entry is the message's JSON with the task id in its headers.
Messages a worker has taken but not acknowledged are elsewhere (`unacked`), which is the point: a queued
job whose message is neither waiting nor running anywhere has lost it.
"""

from __future__ import annotations

import json

import redis

PRIORITY_SEP = "\x06\x16"
MAX_MESSAGES = 100_000  # read at most this many entries per list


def waiting_task_ids(broker_url: str, queue: str) -> set[str]:
    """Task ids waiting in `queue`; ValueError for a broker that is not Redis."""
    if not broker_url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"cannot list messages on broker {broker_url.split(':', 1)[0]!r}")
    client = redis.Redis.from_url(broker_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        keys = [queue.encode(), *client.scan_iter(match=f"{queue}{PRIORITY_SEP}*".encode(), count=100)]
        ids: set[str] = set()
        for key in keys:
            for raw in client.lrange(key, 0, MAX_MESSAGES - 1):
                task_id = task_id_of(raw)
                if task_id:
                    ids.add(task_id)
        return ids
    finally:
        client.close()


def task_id_of(raw: bytes | str) -> str | None:
    try:
        message = json.loads(raw)
        return str(message["headers"]["id"])
    except (ValueError, KeyError, TypeError):
        return None
