"""Which Procfile processes are up, from heartbeats in Redis (no Django needed).

Each Celery worker stamps one key per queue it consumes (`rs:alive:queue:<name>`) from its own event loop;
beat stamps `rs:alive:beat` each time it sends its heartbeat task; both keys expire after `ttl` seconds, so
a process that dies (or a worker whose loop hangs) reads as down within that time. Inference workers keep
their own heartbeats (`inference.broker.WORKERS_KEY`). The web process is up when it answers.
"""

from __future__ import annotations

import json
import time

QUEUE_KEY = "rs:alive:queue:"
BEAT_KEY = "rs:alive:beat"
BEAT_TASK = "webapp.heartbeat"

# Procfile process kind -> the queues it consumes (it is up when each has a live consumer)
WORKER_QUEUES = {"worker": ("ingest", "inference", "default"), "training": ("training",)}
PROCESS_KINDS = ("web", "worker", "training", "beat", "inference")
PROCESS_LABELS = {
    "web": "web",
    "worker": "Celery worker",
    "training": "training worker",
    "beat": "Celery beat",
    "inference": "inference worker",
}


def heartbeat_ttl(interval_s: float) -> int:
    """How long a stamp lasts: three missed beats."""
    return max(3, int(3 * interval_s))


def queues_stamp(redis, queues, ttl: int) -> None:
    pipe = redis.pipeline(transaction=False)
    for queue in queues:
        pipe.set(QUEUE_KEY + queue, time.time(), ex=ttl)
    pipe.execute()


def beat_stamp(redis, ttl: int) -> None:
    redis.set(BEAT_KEY, time.time(), ex=ttl)


def _inference_alive(raw_beats, now: float, alive_s: float) -> bool:
    for raw in raw_beats:
        try:
            if now - float(json.loads(raw).get("at", 0)) < alive_s:
                return True
        except (ValueError, TypeError, AttributeError):
            continue
    return False


def processes_up(redis, now: float | None = None) -> dict[str, bool]:
    """`{"web": True, "worker": bool, "training": bool, "beat": bool, "inference": bool}` in one round trip."""
    from inference.broker import WORKER_ALIVE_S, WORKERS_KEY  # here: Celery imports this module at start-up

    now = time.time() if now is None else now
    queues = [q for kind in WORKER_QUEUES.values() for q in kind]
    pipe = redis.pipeline(transaction=False)
    pipe.mget([QUEUE_KEY + q for q in queues] + [BEAT_KEY])
    pipe.hvals(WORKERS_KEY)
    stamps, inference_beats = pipe.execute()
    fresh = dict(zip(queues, (s is not None for s in stamps[:-1]), strict=True))
    up = {"web": True}
    up.update({kind: all(fresh[q] for q in qs) for kind, qs in WORKER_QUEUES.items()})
    up["beat"] = stamps[-1] is not None
    up["inference"] = _inference_alive(inference_beats, now, WORKER_ALIVE_S)
    return up


def processes_down(up: dict[str, bool]) -> list[str]:
    """Readable names of the kinds that are down, in Procfile order."""
    return [PROCESS_LABELS[kind] for kind in PROCESS_KINDS if not up.get(kind, False)]
