"""Celery task (queue `default`): one delivery attempt, retried with backoff until it lands or gives up."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="webhooks.tasks.deliver_webhook", bind=True, max_retries=None, acks_late=False)
def deliver_webhook(self, delivery_id: int) -> str:
    from .services import delivery_attempt

    retry_in = delivery_attempt(delivery_id=delivery_id)
    if retry_in is not None:
        raise self.retry(countdown=retry_in)
    return "done"
