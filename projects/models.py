"""Projects, the people in them and the machine clients (agents) that call the API with a token.

The tables keep the names they had in the labeling app (`labeling_project`, ...): the models moved here in
Django's state only (projects' migration 0001), no row moved.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .prompts import DEFAULT_PROMPT_TEMPLATE


def default_camera_views() -> list[str]:
    return ["main", "extra"]


class Project(models.Model):
    name = models.CharField(max_length=200, unique=True)
    task_description = models.TextField(blank=True, help_text="Used in VLM prompts.")
    camera_views = models.JSONField(default=default_camera_views, help_text="Camera names, e.g. main, extra.")
    target_success_frames = models.PositiveIntegerField(default=50)
    target_fail_frames = models.PositiveIntegerField(default=150)
    target_windows_per_class = models.PositiveIntegerField(default=50)
    window_size = models.PositiveIntegerField(default=5)
    # Trend-rule parameters for window proposals (shared/reference formats section 4).
    trend_delta_threshold = models.FloatField(default=0.05)
    trend_tail_unclear_ratio = models.FloatField(default=0.15)
    trend_stride = models.PositiveIntegerField(default=1)
    prompt_template = models.TextField(default=DEFAULT_PROMPT_TEMPLATE)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "labeling_project"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def trend_params(self) -> dict:
        return {
            "window_size": self.window_size,
            "stride": self.trend_stride,
            "delta_threshold": self.trend_delta_threshold,
            "tail_unclear_ratio": self.trend_tail_unclear_ratio,
        }


class Membership(models.Model):
    """A person's role in one project. Roles grow: a reviewer may do what an annotator may, and so on."""

    class Role(models.TextChoices):
        ANNOTATOR = "annotator", "Annotator (labels)"
        REVIEWER = "reviewer", "Reviewer (also proposals and others' labels)"
        MANAGER = "manager", "Manager (also settings, members, snapshots, training, deployments)"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.ANNOTATOR)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "labeling_membership"
        ordering = ["project", "user"]
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="membership_unique_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"


class AgentScope(models.TextChoices):
    """What an agent token may do (see projects/access.py for what each one allows)."""

    INGEST = "ingest", "Ingest: create episodes and append steps to its own episodes"
    REWARDS = "rewards", "Rewards: ask its deployments for rewards"
    TELEOP = "teleop", "Teleop: stream live sessions into its projects"
    LABELS = "labels", "Labels: read and write labels, decide proposals"
    TRAINING = "training", "Training: snapshots and training jobs"


class Agent(models.Model):
    """A machine client (simulator, robot host, RL worker) that authenticates with an API token.

    A token may use its `scopes` on the projects it names and the deployments it names (or those of
    its projects); `all_projects` (for admins' tools) extends it to every project and deployment. The
    deployments it names are `Deployment.agents` (`agent.deployments` here): the grant points down from the
    serving app.
    """

    class Kind(models.TextChoices):
        SIM = "sim", "Simulated agent"
        ROBOT = "robot", "Robot agent"
        RL_WORKER = "rl_worker", "RL worker"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.SIM)
    token_prefix = models.CharField(max_length=12, editable=False, help_text="First characters, to recognise a token.")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    scopes = models.JSONField(default=list, blank=True, help_text="Subset of: " + ", ".join(AgentScope.values))
    all_projects = models.BooleanField(
        default=False, help_text="Every project and deployment, present and future (for admins' own tools)."
    )
    projects = models.ManyToManyField(
        Project,
        blank=True,
        related_name="agents",
        help_text="Projects it may touch.",
        db_table="labeling_agent_projects",
    )

    class Meta:
        db_table = "labeling_agent"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    # Lets DRF's IsAuthenticated accept an agent as request.user.
    is_authenticated = True
    is_anonymous = False
    is_staff = False
