"""Episodes (steps and frames) and the labels people and proposals put on them (projects, people and agents
are in the projects app)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from common.jobs.models import Job
from projects.models import Agent, Project
from projects.models import default_camera_views as default_camera_views  # labeling's migration 0001 names it


class Episode(models.Model):
    class Source(models.TextChoices):
        SIM = "sim", "Simulation"
        ROBOT = "robot", "Robot"
        IMPORT = "import", "Import"

    class Status(models.TextChoices):
        OPEN = "open", "Receiving steps"
        FINISHED = "finished", "Finished"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="episodes")
    uuid = models.UUIDField(default=uuid.uuid4, unique=True)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.SIM)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="episodes")
    env_id = models.CharField(max_length=100, blank=True)
    success = models.BooleanField(null=True, blank=True, help_text="Episode-level success, when known.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    num_steps = models.PositiveIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["project", "-created_at"]),
            models.Index(fields=["project", "source"]),
        ]

    def __str__(self) -> str:
        return f"{self.project} / {self.uuid}"


class Step(models.Model):
    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    action = models.JSONField(default=list, blank=True)
    reward = models.FloatField(default=0.0)
    terminated = models.BooleanField(default=False)
    truncated = models.BooleanField(default=False)
    env_success = models.BooleanField(default=False)
    score = models.FloatField(null=True, blank=True, help_text="Trend score (RLinf's gae) when it differs from reward.")
    info = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["episode", "index"]
        constraints = [models.UniqueConstraint(fields=["episode", "index"], name="step_unique_index")]

    def __str__(self) -> str:
        return f"{self.episode_id}#{self.index}"


def frame_upload_to(instance: Frame, filename: str) -> str:
    step = instance.step
    return f"frames/{step.episode.project_id}/{step.episode.uuid}/{step.index:06d}_{instance.camera}{filename[-4:]}"


class Frame(models.Model):
    """One camera image of one step; the pixels live in the storage backend, not the database."""

    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="frames")
    camera = models.CharField(max_length=50)
    image = models.FileField(upload_to=frame_upload_to, max_length=300)
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["step", "camera"], name="frame_unique_camera")]


class LabelSource(models.TextChoices):
    HUMAN = "human", "Human"
    PROPOSAL = "proposal", "Proposal"
    MODEL = "model", "Model"


class ProposalStatus(models.TextChoices):
    OPEN = "open", "Open"
    ACCEPTED = "accepted", "Accepted"
    REJECTED = "rejected", "Rejected"


OPEN_PROPOSAL = models.Q(source=LabelSource.PROPOSAL, status=ProposalStatus.OPEN)


class FrameLabel(models.Model):
    """success/fail for one step. One row per (step, source): a human label and a proposal coexist."""

    class Value(models.TextChoices):
        SUCCESS = "success", "Success"
        FAIL = "fail", "Fail"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="frame_labels")
    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="frame_labels")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="labels")
    value = models.CharField(max_length=10, choices=Value.choices)
    source = models.CharField(max_length=10, choices=LabelSource.choices, default=LabelSource.HUMAN)
    status = models.CharField(max_length=10, choices=ProposalStatus.choices, default=ProposalStatus.OPEN)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL)
    params = models.JSONField(default=dict, blank=True, help_text="What produced a proposal or model label.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["step", "source"], name="framelabel_unique_source")]
        indexes = [
            models.Index(fields=["project", "source", "value"]),
            models.Index(fields=["episode", "source"]),
            # Open proposals, counted per project (project page) and per episode (episode list filters).
            models.Index(fields=["project"], condition=OPEN_PROPOSAL, name="framelabel_open_project"),
            models.Index(fields=["episode"], condition=OPEN_PROPOSAL, name="framelabel_open_episode"),
        ]


class WindowLabel(models.Model):
    """positive/negative/unclear progress over steps start..end (inclusive). Windows may overlap."""

    class Value(models.TextChoices):
        POSITIVE = "positive", "Positive"
        NEGATIVE = "negative", "Negative"
        UNCLEAR = "unclear", "Unclear"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="window_labels")
    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="window_labels")
    start = models.PositiveIntegerField()
    end = models.PositiveIntegerField()
    value = models.CharField(max_length=10, choices=Value.choices)
    source = models.CharField(max_length=10, choices=LabelSource.choices, default=LabelSource.HUMAN)
    status = models.CharField(max_length=10, choices=ProposalStatus.choices, default=ProposalStatus.OPEN)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    score = models.FloatField(null=True, blank=True, help_text="Score delta that produced a proposal.")
    params = models.JSONField(default=dict, blank=True, help_text="Parameters that produced a proposal.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["episode", "start"]
        constraints = [
            models.UniqueConstraint(fields=["episode", "start", "end", "source"], name="windowlabel_unique_span"),
            models.CheckConstraint(condition=models.Q(end__gte=models.F("start")), name="windowlabel_end_after_start"),
        ]
        indexes = [
            models.Index(fields=["project", "source", "value"]),
            models.Index(fields=["episode", "source"]),
            models.Index(fields=["project"], condition=OPEN_PROPOSAL, name="windowlabel_open_project"),
            models.Index(fields=["episode"], condition=OPEN_PROPOSAL, name="windowlabel_open_episode"),
        ]


class LabelChange(models.Model):
    """Append-only history of every label change (who, what, before, after)."""

    class Kind(models.TextChoices):
        FRAME = "frame", "Frame"
        WINDOW = "window", "Window"

    class Action(models.TextChoices):
        SET = "set", "Set"
        CLEAR = "clear", "Clear"
        ACCEPT = "accept", "Accept proposal"
        REJECT = "reject", "Reject proposal"
        PROPOSE = "propose", "Propose"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="label_changes")
    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="label_changes")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    action = models.CharField(max_length=10, choices=Action.choices)
    source = models.CharField(max_length=10, choices=LabelSource.choices)
    start = models.PositiveIntegerField(help_text="Step index (frames) or window start.")
    end = models.PositiveIntegerField()
    old_value = models.CharField(max_length=10, blank=True)
    new_value = models.CharField(max_length=10, blank=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["episode", "-at"])]


class ImportJob(Job):
    """An upload being imported by a Celery task (queue `ingest`), so the web process never unpickles."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="import_jobs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    folder = models.CharField(max_length=500, help_text="Where the uploaded files wait (removed when done).")
    env_id = models.CharField(max_length=100, blank=True, default="")
    total = models.PositiveIntegerField(default=0, help_text="Importable files found.")
    done = models.PositiveIntegerField(default=0, help_text="Files handled so far.")
    summary = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at"]


class ProposalJob(Job):
    """Proposals (re)generated for every episode of a project by a Celery task (queue `ingest`), so the web
    process never loops over a whole project; the row records progress, the counts, and a cancellation."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="proposal_jobs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    total = models.PositiveIntegerField(default=0, help_text="Episodes to go through (known once running).")
    done = models.PositiveIntegerField(default=0, help_text="Episodes done so far.")
    summary = models.JSONField(default=dict, blank=True, help_text="Proposals created, updated and removed.")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["project", "status"])]
