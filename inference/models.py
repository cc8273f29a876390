"""Inference models: deployments (served reward models), the frames they served and their monitors.

Deployments of trained reward models:
A Deployment serves one trained model under a name with the reward settings an RL run needs
(shared/reference/formats.md section 5). Inference workers load the model; the web process reads the
settings and turns probabilities into rewards. `version` grows whenever the served checkpoint changes,
so workers know to reload.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.db import models

from labeling.models import Episode
from projects.models import Project
from training.evaluation import precision

__all__ = ["Deployment", "DeploymentEvent", "DeploymentMonitor", "ServedFrame"]


def new_version() -> int:
    """A version number above any this deployment name had before: milliseconds since the epoch.

    Workers keep a loaded model per deployment name and reload only for a newer version, so a deployment
    deleted and made again under the same name must not start counting from 1 again.
    """
    return time.time_ns() // 1_000_000


class Deployment(models.Model):
    class RewardMode(models.TextChoices):
        PER_STEP = "per_step", "Per step"
        TERMINAL = "terminal", "Terminal (first done step only)"
        HISTORY_BUFFER = "history_buffer", "History buffer"

    class RewardType(models.TextChoices):
        BINARY = "binary", "Binary (success_reward / fail_reward)"
        SOFT = "soft", "Soft (the probability)"
        THRESHOLDED = "thresholded", "Thresholded probability (RLinf: 0 at or below threshold)"

    class ChatPrompt(models.TextChoices):
        TRAINED = "trained", "The prompt the model was trained on (a request's text is only compared)"
        REQUEST = "request", "The request's text (the trained prompt when it sends none)"

    class OodAction(models.TextChoices):
        FLAG = "flag", "Flag only (the item says ood: true; its reward is unchanged)"
        FAIL_REWARD = "fail_reward", "Pay fail_reward"
        INTERVAL_REWARD = "interval_reward", "Pay interval_reward"

    class Status(models.TextChoices):
        LOADING = "loading", "Loading"
        HEALTHY = "healthy", "Healthy"
        UNHEALTHY = "unhealthy", "Unhealthy"

    name = models.SlugField(max_length=100, unique=True, help_text="RL workers ask for rewards by this name.")
    trained_model = models.ForeignKey(
        "training.TrainedModel",
        on_delete=models.PROTECT,
        related_name="deployments",
        help_text="The served checkpoint.",
    )
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="deployments")
    # The tokens granted this deployment besides those of its project (`agent.deployments` from the other side;
    # the table keeps the name it had when the grant was Agent.deployments).
    agents = models.ManyToManyField(
        "projects.Agent",
        blank=True,
        related_name="deployments",
        db_table="labeling_agent_deployments",
        help_text="Agents that may ask it for rewards (besides those of its project).",
    )
    # Reward settings (formats.md section 5).
    reward_mode = models.CharField(max_length=20, choices=RewardMode.choices, default=RewardMode.PER_STEP)
    threshold = models.FloatField(default=0.5, help_text="success = probability > threshold")
    reward_type = models.CharField(max_length=20, choices=RewardType.choices, default=RewardType.SOFT)
    success_reward = models.FloatField(default=1.0)
    fail_reward = models.FloatField(default=0.0)
    env_reward_weight = models.FloatField(default=0.0)
    reward_weight = models.FloatField(default=1.0)
    history_size = models.PositiveIntegerField(default=5)
    # Defaults that never fail a run: no window shorter than 2 steps (a Qwen3-VL video needs two frames, its
    # temporal patch) and RLinf's unset interval (= history_size, its history manager's default).
    min_history_size = models.PositiveIntegerField(
        default=2, help_text="Steps a stream must hold before a window, and the shortest window ever scored."
    )
    input_interval = models.PositiveIntegerField(default=0, help_text="0: unset, i.e. history_size (RLinf).")
    interval_reward = models.FloatField(default=0.0, help_text="Reward of steps the history buffer does not score.")
    input_on_done = models.BooleanField(
        default=False, help_text="Also score the steps since the last window on a done step (RLinf)."
    )
    history_reward_assign = models.BooleanField(
        default=False, help_text="Give a scored window's reward to its earlier steps too (RLinf's env worker)."
    )
    gt_success_bonus = models.FloatField(
        default=0.0, help_text="Added to the model output where the env reports success."
    )
    ood_action = models.CharField(
        max_length=20,
        choices=OodAction.choices,
        default=OodAction.FLAG,
        help_text="What a frame the ResNet model flags as out of distribution receives (only the service flags frames).",
    )
    aliases = models.JSONField(
        default=list,
        blank=True,
        help_text="Other names the chat endpoint accepts as `model` (case-insensitive), e.g. Qwen3-VL-4B-Instruct.",
    )
    chat_prompt = models.CharField(
        max_length=10,
        choices=ChatPrompt.choices,
        default=ChatPrompt.TRAINED,
        help_text="Which prompt a chat request is judged with; a request whose text differs is reported either way.",
    )
    inference_precision = models.CharField(
        max_length=4,
        choices=precision.CHOICES,
        default=precision.FP32,
        help_text="The arithmetic of a ResNet model's forward pass in the workers; one a worker's device cannot run is refused.",
    )
    # Dynamic batching in the inference workers.
    max_batch_size = models.PositiveIntegerField(default=64)
    max_wait_ms = models.FloatField(default=2.0)
    # Health, reported by the workers.
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.LOADING)
    error = models.TextField(blank=True)
    version = models.PositiveBigIntegerField(
        default=new_version, help_text="Grows when the served checkpoint changes (never reused, see new_version)."
    )
    revision = models.PositiveIntegerField(
        default=1, help_text="The readable version (v1, v2, ...): one more each time another model is served."
    )
    paused = models.BooleanField(default=False, help_text="A paused deployment answers clients 503 saying so.")
    # Served-frames gallery: keep every k-th served frame (0 = off).
    sample_every = models.PositiveIntegerField(default=0, help_text="Keep every k-th served frame (0 = off).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def version_label(self) -> str:
        return f"v{self.revision}"


class DeploymentEvent(models.Model):
    """One change to a deployment and who made it; kept after the deployment is deleted (by its name)."""

    class Action(models.TextChoices):
        CREATED = "created", "Created"
        SWITCHED = "switched", "Switched model"
        SETTINGS = "settings", "Changed settings"
        PAUSED = "paused", "Paused"
        RESUMED = "resumed", "Resumed"
        RELOADED = "reloaded", "Reloaded"
        DELETED = "deleted", "Deleted"

    deployment = models.ForeignKey(Deployment, null=True, blank=True, on_delete=models.SET_NULL, related_name="events")
    deployment_name = models.CharField(max_length=100, db_index=True)
    action = models.CharField(max_length=10, choices=Action.choices)
    actor = models.CharField(max_length=150, help_text="Who: a user name, an agent token or a retrain policy.")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revision = models.PositiveIntegerField(help_text="The deployment's revision after the change.")
    detail = models.JSONField(default=dict, blank=True, help_text="Models switched, settings changed (old, new).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.deployment_name} {self.action} by {self.actor}"


def served_frame_upload_to(instance: ServedFrame, filename: str) -> str:
    return f"served/{instance.deployment_id}/{filename}"


class ServedFrame(models.Model):
    """A frame a deployment served, kept for the gallery with the probability it got."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="served_frames")
    image = models.FileField(upload_to=served_frame_upload_to, max_length=300)
    probability = models.FloatField()
    success = models.BooleanField(help_text="Judged success: probability above the deployment's threshold.")
    model_version = models.PositiveBigIntegerField(default=1)
    labeled_episode = models.ForeignKey(Episode, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    label_value = models.CharField(max_length=10, blank=True)
    # Reward-hacking monitor: frames where the model and the env's own success flag disagree.
    env_success = models.BooleanField(null=True, blank=True, help_text="The env's success flag, when sent.")
    run = models.CharField(max_length=100, blank=True, help_text="The RL run (agent and stream) that asked.")
    episode_ref = models.CharField(max_length=100, blank=True, help_text="The RL episode id, when sent.")
    episode_step = models.PositiveIntegerField(null=True, blank=True)
    queued = models.BooleanField(default=False, help_text="In the labeling queue (an alarm raised on it).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["deployment", "success", "-created_at"])]

    @property
    def disagrees(self) -> bool:
        return self.env_success is not None and self.env_success != self.success


class DeploymentMonitor(models.Model):
    """Reward-hacking monitor settings and alarm state, one row per deployment (made on first use)."""

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
