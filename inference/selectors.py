"""Reads for inference."""

from __future__ import annotations

import json
import time

from django.db.models import QuerySet

from .broker import WORKER_ALIVE_S, WORKERS_KEY
from .models import Deployment, ServedFrame
from .serving import sync_redis


def deployment_list() -> QuerySet[Deployment]:
    return Deployment.objects.select_related("trained_model", "project").order_by("name")


def served_frames(*, deployment: Deployment, success: bool, limit: int = 120) -> QuerySet[ServedFrame]:
    return ServedFrame.objects.filter(deployment=deployment, success=success).order_by("-created_at")[:limit]


def workers_alive() -> list[dict]:
    """Inference workers that sent a heartbeat recently (id, models loaded, requests served)."""
    now, alive = time.time(), []
    for worker_id, raw in sync_redis().hgetall(WORKERS_KEY).items():
        beat = json.loads(raw)
        if now - beat.get("at", 0) < WORKER_ALIVE_S:
            alive.append({"id": worker_id.decode(), **beat})
    return sorted(alive, key=lambda w: w["id"])


def worker_devices() -> set[str]:
    """The devices the live inference workers score on ("cpu", "cuda:0"; "" for a worker that does not say)."""
    return {str(w.get("device", "")) for w in workers_alive()}
