"""What `/healthz` and the metrics scrape read: database, Redis, inference workers, deployments and which
Procfile processes are up (webapp.monitoring.heartbeats).

Each check answers `{"ok": bool, ...}` and never raises: a failing dependency is a result, not a crash.
`health_summary` is what anonymous callers get: each part's `ok`, nothing that names a project, deployment or
host.
"""

from __future__ import annotations

import json
import time

from django.db import connection

from inference.broker import QUEUE_PREFIX, WORKER_ALIVE_S, WORKERS_KEY
from webapp.monitoring.heartbeats import PROCESS_KINDS, processes_up

CELERY_QUEUES = ("ingest", "training", "inference", "default")


def _redis():
    from inference.serving import broker

    return broker().redis


def check_database() -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True}
    except Exception as exc:
        return {"ok": False, "error": f"{exc.__class__.__name__}: {exc}"[:300]}


def check_redis(redis=None) -> dict:
    try:
        (redis or _redis()).ping()
        return {"ok": True}
    except Exception as exc:
        return {"ok": False, "error": f"{exc.__class__.__name__}: {exc}"[:300]}


def alive_workers(redis, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    alive = []
    for worker_id, raw in redis.hgetall(WORKERS_KEY).items():
        try:
            beat = json.loads(raw)
        except ValueError:
            continue
        if now - float(beat.get("at", 0)) < WORKER_ALIVE_S:
            alive.append(worker_id.decode())
    return sorted(alive)


def deployment_states() -> list[dict]:
    from inference.models import Deployment

    return [
        {"name": name, "ok": status != Deployment.Status.UNHEALTHY, "status": status, "error": error[:300]}
        for name, status, error in Deployment.objects.order_by("name").values_list("name", "status", "error")
    ]


def queue_depths(redis, deployments: list[str]) -> dict[str, int]:
    """Waiting messages per Celery queue (`celery:<name>`) and per deployment (`inference:<name>`)."""
    pipe = redis.pipeline()
    names = [f"celery:{q}" for q in CELERY_QUEUES] + [f"inference:{d}" for d in deployments]
    for q in CELERY_QUEUES:
        pipe.llen(q)
    for d in deployments:
        pipe.llen(QUEUE_PREFIX + d)
    return dict(zip(names, pipe.execute(), strict=True))


def check_processes(redis) -> dict:
    """`{"ok", "web", "worker", "training", "beat", "inference"}`: each Procfile process kind up or down."""
    try:
        up = processes_up(redis) if redis is not None else None
    except Exception:
        up = None
    if up is None:  # Redis unreachable: no heartbeat can be read
        up = {kind: kind == "web" for kind in PROCESS_KINDS}
    return {"ok": all(up.values()), **up}


def health_report() -> dict:
    """The whole picture; `ok` is false when any part is (the web answers 503 then)."""
    database = check_database()
    redis = _redis()
    redis_check = check_redis(redis)
    processes = check_processes(redis if redis_check["ok"] else None)
    deployments = deployment_states() if database["ok"] else []
    workers: dict = {"ok": True, "alive": []}
    if redis_check["ok"]:
        workers["alive"] = alive_workers(redis)
        if deployments and not workers["alive"]:
            workers = {"ok": False, "alive": [], "error": "deployments exist but no inference worker is alive"}
    else:
        workers = {"ok": False, "alive": [], "error": "Redis is unreachable"}
    ok = database["ok"] and redis_check["ok"] and workers["ok"] and processes["ok"]
    ok = ok and all(d["ok"] for d in deployments)
    return {
        "ok": ok,
        "database": database,
        "redis": redis_check,
        "workers": workers,
        "deployments": deployments,
        "processes": processes,
    }


def health_summary(report: dict) -> dict:
    """The report without names, errors or hosts: `{"ok", "database": {"ok"}, ..., "deployments": {"ok"},
    "processes": {"ok", "web", "worker", ...}}` (booleans only)."""
    deployments = report.get("deployments") or []
    parts = {name: {"ok": bool(report[name]["ok"])} for name in ("database", "redis", "workers")}
    processes = {key: bool(value) for key, value in report["processes"].items()}
    return {
        "ok": bool(report["ok"]),
        **parts,
        "deployments": {"ok": all(d["ok"] for d in deployments)},
        "processes": processes,
    }
