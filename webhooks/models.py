"""A webhook (a URL an admin registered for some of a project's events) and its delivery log."""

from __future__ import annotations

import secrets

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import models

from projects.models import Project

from .events import EVENTS, unknown_events


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def validate_events(value) -> None:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"events must be a non-empty list of names: {', '.join(EVENTS)}")
    unknown = unknown_events(value)
    if unknown:
        raise ValidationError(f"unknown event(s) {', '.join(unknown)}; known: {', '.join(EVENTS)}")


class Webhook(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=500, validators=[URLValidator(schemes=["http", "https"])])
    events = models.JSONField(default=list, validators=[validate_events], help_text=", ".join(EVENTS))
    secret = models.CharField(
        max_length=100, default=new_secret, help_text="HMAC-SHA256 key of the X-RS-Signature header."
    )
    active = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "url"]

    def __str__(self) -> str:
        return f"{self.project} → {self.url}"


class WebhookDelivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=50)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True, help_text="First 2,000 characters of the last answer.")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["webhook", "-created_at"])]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event} → {self.webhook.url} ({self.status})"
