"""Webhook writes: record an event for every subscribed webhook, and deliver one delivery (one attempt).

Emitters call `webhook_emit` inside their own transaction; the deliveries are queued on Celery once it
commits, so a rolled-back change sends nothing.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from datetime import timedelta

import urllib3
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .events import DELIVERY_HEADER, EVENT_HEADER, EVENTS, MAX_ATTEMPTS, SIGNATURE_HEADER, backoff_s, sign
from .models import Webhook, WebhookDelivery
from .pinned_post import post_pinned
from .targets import TargetRefused, target_resolve

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
RESPONSE_KEEP = 2000


def body_bytes(payload: dict) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def webhook_emit(*, project_id: int | None, event: str, data: dict) -> list[int]:
    """Create a pending delivery for each active webhook of the project that wants `event`; ids."""
    if event not in EVENTS:
        raise ValueError(f"unknown webhook event {event!r}")
    if project_id is None:
        return []
    ids = []
    for hook in Webhook.objects.filter(project_id=project_id, active=True).select_related("project"):
        if event not in hook.events:
            continue
        delivery = WebhookDelivery.objects.create(webhook=hook, event=event, payload={})
        delivery.payload = {
            "id": delivery.pk,
            "event": event,
            "created_at": timezone.now().isoformat(),
            "project": {"id": hook.project_id, "name": hook.project.name},
            "data": data,
        }
        delivery.save(update_fields=["payload"])
        ids.append(delivery.pk)
    if ids:
        transaction.on_commit(lambda: _enqueue(ids))
    return ids


def _enqueue(ids: list[int]) -> None:
    """Hand the deliveries to Celery; a broker outage leaves them pending (admin: "Deliver again")."""
    from .tasks import deliver_webhook

    for delivery_id in ids:
        try:
            deliver_webhook.delay(delivery_id)
        except Exception:
            log.exception("could not queue webhook delivery %s; it stays pending", delivery_id)


def webhook_emit_safely(**kwargs) -> None:
    """For emitters whose own work must not fail because of a webhook (e.g. the end of a training job)."""
    try:
        webhook_emit(**kwargs)
    except Exception:
        log.exception("could not record webhook event %s", kwargs.get("event"))


def delivery_attempt(*, delivery_id: int, resolve: Callable = socket.getaddrinfo) -> int | None:
    """POST the delivery once. None when finished (delivered, failed for good, or gone); else the seconds
    to wait before the next attempt. The target is resolved and checked again now (webhooks.targets) and the
    POST goes to the checked address; a refused target counts as a failed attempt, with the reason."""
    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None or delivery.status != WebhookDelivery.Status.PENDING:
        return None
    hook = delivery.webhook
    body = body_bytes(delivery.payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "RewardStudio-Webhook/1",
        EVENT_HEADER: delivery.event,
        DELIVERY_HEADER: str(delivery.pk),
        SIGNATURE_HEADER: sign(hook.secret, body),
    }
    delivery.attempts += 1
    delivery.last_attempt_at = timezone.now()
    try:
        target = target_resolve(hook.url, allow_private=settings.WEBHOOK_ALLOW_PRIVATE_TARGETS, resolve=resolve)
        answer = post_pinned(target, body, headers, timeout=TIMEOUT_S, keep=RESPONSE_KEEP)
        ok = 200 <= answer.status < 400
        delivery.response_status = answer.status
        delivery.response_body = answer.text
        delivery.error = "" if ok else f"HTTP {answer.status}"
    except (TargetRefused, urllib3.exceptions.HTTPError) as exc:
        delivery.response_status = None
        delivery.response_body = ""
        delivery.error = f"{exc.__class__.__name__}: {exc}"[:RESPONSE_KEEP]
        ok = False
    retry_in = None
    if ok:
        delivery.status = WebhookDelivery.Status.DELIVERED
        delivery.next_attempt_at = None
    elif delivery.attempts >= MAX_ATTEMPTS:
        delivery.status = WebhookDelivery.Status.FAILED
        delivery.next_attempt_at = None
    else:
        retry_in = backoff_s(delivery.attempts)
        delivery.next_attempt_at = delivery.last_attempt_at + timedelta(seconds=retry_in)
    delivery.save()
    return retry_in


def delivery_retry(*, delivery: WebhookDelivery) -> None:
    """An admin asks for another try of a failed delivery (attempts start over)."""
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=WebhookDelivery.Status.PENDING, attempts=0, next_attempt_at=None
    )
    transaction.on_commit(lambda: _enqueue([delivery.pk]))
