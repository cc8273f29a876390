"""The reward-hacking alarm as a webhook event: `alarm.raised`, signed, delivered and retried by Celery
like every other event (webhooks/services.py). Connected to `alarm_signal` in InferenceConfig.ready."""

from __future__ import annotations

from django.urls import reverse

from webhooks import events
from webhooks.services import webhook_emit_safely

from ..models import Deployment


def alarm_webhook_data(*, deployment: Deployment, rate: float, run: str, frame_ids: list[int]) -> dict:
    monitor = getattr(deployment, "monitor", None)
    return {
        "deployment": {"name": deployment.name, "version": deployment.version},
        "false_success_rate": rate,
        "run": run,
        "threshold": monitor.false_success_threshold if monitor else None,
        "frames_queued": len(frame_ids),
        "health": reverse("deployment-health", args=[deployment.name]),
    }


def on_alarm_raised(sender, *, deployment_id: int, rate: float, run: str, frame_ids: list[int], **_) -> None:
    deployment = Deployment.objects.select_related("monitor", "trained_model").filter(pk=deployment_id).first()
    if deployment is None:
        return
    project_id = deployment.project_id or deployment.trained_model.project_id
    data = alarm_webhook_data(deployment=deployment, rate=rate, run=run, frame_ids=frame_ids)
    webhook_emit_safely(project_id=project_id, event=events.ALARM_RAISED, data=data)
