"""Reads for the reward-hacking monitor: time series, per-run rates, probability distributions, per-step
success rates and the alarm, as one dict for the monitor page, its JSON API and the health endpoint."""

from __future__ import annotations

import time

from django.db.models import F

from ..models import Deployment, DeploymentMonitor, ServedFrame
from ..serving import sync_redis
from . import rules as monitor
from .services import _key, ref_of, settings_of, window_counts

MAX_POINTS = 120
MAX_HOURS = 48


def monitor_row(deployment: Deployment) -> DeploymentMonitor:
    """The deployment's monitor settings and alarm; an unsaved row with the defaults when it has none yet
    (reads never write: the row is made by the first write, a settings save or a raised alarm)."""
    return DeploymentMonitor.objects.filter(deployment=deployment).first() or DeploymentMonitor(deployment=deployment)


def alarm_state(deployment: Deployment, row: DeploymentMonitor | None = None) -> dict:
    """What the health endpoint reports: the alarm and the current window's rates."""
    row = row or monitor_row(deployment)
    settings = settings_of(row)
    rates = monitor.window_rates(
        window_counts(ref_of(deployment.name, deployment.pk), now=time.time(), window_s=settings.window_s)
    )
    return {
        "alarm": row.alarm_active,
        "alarm_since": row.alarm_since.isoformat() if row.alarm_since else None,
        "alarm_false_success_rate": row.alarm_rate,
        "alarm_run": row.alarm_run,
        "false_success_threshold": settings.false_success_threshold,
        "hold_s": settings.hold_s,
        "window_s": settings.window_s,
        **rates,
    }


def time_series(ref: str, *, hours: float, now: float | None = None) -> dict:
    """Rates over time, buckets merged into at most MAX_POINTS points, and the period's per-run rates."""
    now = now or time.time()
    start = now - min(max(hours, 0.01), MAX_HOURS) * 3600
    redis = sync_redis()
    buckets = [int(b) for b in redis.zrangebyscore(_key("idx", ref), start, "+inf")]
    pipe = redis.pipeline(transaction=False)
    for b in buckets:
        pipe.hgetall(_key("b", ref, b))
    raw = pipe.execute()
    span = max(monitor.BUCKET_S, int((now - start) / MAX_POINTS) // monitor.BUCKET_S * monitor.BUCKET_S)
    grouped: dict[int, list] = {}
    for b, counts in zip(buckets, raw, strict=True):
        grouped.setdefault(b // span * span, []).append(counts)
    points = {t: monitor.merge(c) for t, c in sorted(grouped.items())}
    total = monitor.merge(raw)
    rows = [monitor.window_rates(c) for c in points.values()]
    runs_over_time: dict[str, dict[int, float | None]] = {}
    for t, c in points.items():
        for run, r in monitor.runs_of(c).items():
            runs_over_time.setdefault(run, {})[t] = r["false_success_rate"]
    times = list(points)
    return {
        "times": times,
        "frames": [r["frames"] for r in rows],
        "false_success_rate": [r["false_success_rate"] for r in rows],
        "false_fail_rate": [r["false_fail_rate"] for r in rows],
        "model_success_rate": [r["model_success_rate"] for r in rows],
        "runs": monitor.runs_of(total),
        "run_false_success": {run: [by_t.get(t) for t in times] for run, by_t in runs_over_time.items()},
        "served_histogram": monitor.histogram(total),
        "totals": monitor.window_rates(total),
        **ood_series(list(points.values()), total),
    }


def ood_series(points: list, total) -> dict:
    """Off-distribution frames per point (flagged, and the rate among the frames checked) and in the period."""
    return {
        "ood_frames": [int(c.get("ood", 0)) for c in points],
        "ood_rate": [monitor.rate(int(c.get("ood", 0)), int(c.get("oodn", 0))) for c in points],
        "ood_total": int(total.get("ood", 0)),
        "ood_checked": int(total.get("oodn", 0)),
    }


def training_histogram(deployment: Deployment) -> list[int] | None:
    """Probability histogram of the served model on its own validation split (None when not stored)."""
    from training.resnet.val_predictions import read_val_predictions
    from training.storage import local_path

    try:
        result = read_val_predictions(local_path(deployment.trained_model.checkpoint_path))
    except (OSError, ValueError, KeyError):
        return None
    return monitor.histogram_of(result[0].tolist()) if result is not None else None


def steps_series(ref: str) -> dict:
    return monitor.steps_series(sync_redis().hgetall(_key("steps", ref)))


def disagreeing_frames(deployment: Deployment, *, limit: int = 60):
    return (
        ServedFrame.objects.filter(deployment=deployment, env_success__isnull=False)
        .exclude(env_success=F("success"))
        .select_related("labeled_episode")
        .order_by("-queued", "-created_at")[:limit]
    )


def monitor_data(deployment: Deployment, *, hours: float = 1.0) -> dict:
    row = monitor_row(deployment)
    ref = ref_of(deployment.name, deployment.pk)
    return {
        "deployment": deployment.name,
        "status": deployment.status,
        "state": alarm_state(deployment, row),
        "series": time_series(ref, hours=hours),
        "training_histogram": training_histogram(deployment),
        "steps": steps_series(ref),
        "bins": monitor.HIST_BINS,
    }
