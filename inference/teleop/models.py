"""Teleoperation sessions.

A session is one connection lifetime of a robot agent streaming to the server (resumed across
reconnects). Its steps are recorded as ordinary episodes, so a past session opens in the labeling page.
"""

from __future__ import annotations

from django.db import models

from labeling.models import Episode
from projects.models import Agent, Project

__all__ = ["TeleopSession"]


class TeleopSession(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="teleop_sessions")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="teleop_sessions")
    deployment_name = models.CharField(max_length=100, blank=True, help_text="Deployment that scores the frames.")
    robot = models.CharField(max_length=100, blank=True)
    env_id = models.CharField(max_length=100, blank=True)
    policy = models.CharField(max_length=50, blank=True)
    hz = models.FloatField(default=10.0, help_text="Control rate the agent announced.")
    cameras = models.JSONField(default=list, blank=True)
    is_live = models.BooleanField(default=True)
    started_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    step_count = models.PositiveIntegerField(default=0)
    inferred_count = models.PositiveIntegerField(default=0)
    dropped_frames = models.PositiveIntegerField(default=0, help_text="Frames replaced before inference ran.")
    label_count = models.PositiveIntegerField(default=0)
    stats = models.JSONField(default=dict, blank=True, help_text="Latency, rate and last probability.")
    episodes = models.ManyToManyField(Episode, blank=True, related_name="teleop_sessions")

    class Meta:
        db_table = "inference_teleopsession"  # made by the inference app's migrations before teleop had its own app
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["is_live", "-started_at"], name="inference_t_is_live_bbf625_idx")]

    def __str__(self) -> str:
        return f"teleop #{self.pk} {self.agent} / {self.project}"

    @property
    def group_name(self) -> str:
        return f"teleop_{self.pk}"
