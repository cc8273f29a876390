"""Reward-hacking monitor settings and alarm state, one row per deployment (made on first use)."""

from __future__ import annotations

from django.db import models

from .deployment import Deployment

__all__ = ["DeploymentMonitor"]


class DeploymentMonitor(models.Model):
    deployment = models.OneToOneField(Deployment, on_delete=models.CASCADE, related_name="monitor")
    enabled = models.BooleanField(default=True, help_text="Raise alarms (the counters are kept either way).")
    false_success_threshold = models.FloatField(
        default=0.3, help_text="Alarm when the false-success rate (model success, env fail) stays above this."
    )
    hold_s = models.FloatField(default=600.0, help_text="...for this many seconds.")
    window_s = models.FloatField(default=60.0, help_text="Seconds of served frames each rate is computed over.")
    min_items = models.PositiveIntegerField(default=20, help_text="Env-flagged frames a window needs to count.")
    alarm_since = models.DateTimeField(null=True, blank=True, help_text="When the current alarm was raised.")
    alarm_rate = models.FloatField(null=True, blank=True, help_text="False-success rate when it was raised.")
    alarm_run = models.CharField(max_length=100, blank=True, help_text="The RL run whose frames raised it.")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"monitor of {self.deployment}"

    @property
    def alarm_active(self) -> bool:
        return self.alarm_since is not None
