"""Dataset snapshots, training jobs (with their metric history) and the models they produce.

Files live in Django's storage under storage-relative folders (`snapshots/project_<id>/snapshot_<n>/`,
`checkpoints/job_<id>/`). Torch needs local files: `training.storage.local_path()` gives MEDIA_ROOT's own
path with the local storage and a copy in the machine's cache with an object store (common.filestore);
jobs write into a work folder and publish it before a row points at it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from common.jobs.models import Job, Lifecycle
from projects.models import Project

from .datasets.binary_split import split_leak
from .resnet.rlinf_match import RLinfMatch, rlinf_match_for


class ImmutableError(RuntimeError):
    """A written snapshot was about to change."""


class ModelKind(models.TextChoices):
    RESNET = "resnet", "ResNet reward classifier"
    VLM = "vlm", "Qwen3-VL trend (LoRA)"


class DatasetSnapshot(Job):
    """An immutable, numbered export of a project's labels (options, counts and files fixed once ready).

    Its build is a job whose published statuses are its own: `building` (queued, or running while a build's
    heartbeat is set), `ready` (succeeded), `failed`."""

    class Status(models.TextChoices):
        BUILDING = "building", "Building"
        READY = "ready", "Ready"
        FAILED = "failed", "Failed"

    lifecycle = Lifecycle(
        queued=Status.BUILDING, running=Status.BUILDING, succeeded=Status.READY, failed=Status.FAILED, cancelled=None
    )

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="snapshots")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.BUILDING)
    options = models.JSONField(default=dict, help_text="Export options (sources, split, ratio, sampling, seed).")
    stats = models.JSONField(default=dict, blank=True, help_text="Label counts per split, episodes, sources.")
    folder = models.CharField(max_length=300, blank=True, help_text="Storage-relative folder of the files.")
    frames_done = models.PositiveIntegerField(default=0, help_text="Frames written so far by the build.")
    frames_total = models.PositiveIntegerField(default=0, help_text="Frames the build will write (0: not known yet).")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["project", "-number"]
        constraints = [models.UniqueConstraint(fields=["project", "number"], name="snapshot_unique_number")]

    def __str__(self) -> str:
        return f"{self.project} snapshot #{self.number}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding and type(self).objects.filter(pk=self.pk, status=self.Status.READY).exists():
            raise ImmutableError(f"snapshot #{self.number} of {self.project} is written and cannot change")
        super().save(*args, **kwargs)

    @property
    def shared_episodes(self) -> int:
        """Episodes with frames in both train and val (a frame split's leak)."""
        return split_leak(self.stats)[0]

    @property
    def split_warning(self) -> str:
        """The sentence that says validation shares episodes with training ('' when it does not)."""
        return split_leak(self.stats)[1]


class TrainingJob(Job):
    """One training run of one kind on one snapshot. Status moves only by guarded updates (services)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="training_jobs")
    snapshot = models.ForeignKey(DatasetSnapshot, on_delete=models.PROTECT, related_name="jobs")
    kind = models.CharField(max_length=10, choices=ModelKind.choices, default=ModelKind.RESNET)
    name = models.CharField(max_length=200, blank=True)
    config = models.JSONField(default=dict)
    cancel_requested = models.BooleanField(default=False)
    eta_seconds = models.FloatField(null=True, blank=True)
    summary = models.JSONField(default=dict, blank=True, help_text="Latest and best metrics.")
    log = models.TextField(blank=True)
    error_detail = models.TextField(blank=True, help_text="The failed run's traceback (admin and logs only).")
    worker = models.CharField(max_length=200, blank=True, help_text="Host and pid running the job (shown only).")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["project", "-created_at"]), models.Index(fields=["status", "heartbeat_at"])]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.kind}, {self.status})"

    @property
    def checkpoint_folder(self) -> str:
        return f"checkpoints/job_{self.pk}"


class JobMetric(models.Model):
    """One point of a job's curves: a training step or a validation epoch."""

    class Kind(models.TextChoices):
        STEP = "step", "Training step"
        EPOCH = "epoch", "Validation epoch"

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="metric_points")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    step = models.PositiveIntegerField()
    epoch = models.PositiveIntegerField(null=True, blank=True)
    values = models.JSONField(default=dict)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "kind", "step"]
        indexes = [models.Index(fields=["job", "kind", "step"])]


class TrainedModel(models.Model):
    """A checkpoint folder a job produced (the best by validation loss), ready to evaluate and deploy."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="trained_models")
    job = models.ForeignKey(TrainingJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="models")
    snapshot = models.ForeignKey(
        DatasetSnapshot, null=True, blank=True, on_delete=models.SET_NULL, related_name="trained_models"
    )
    kind = models.CharField(max_length=10, choices=ModelKind.choices, default=ModelKind.RESNET)
    name = models.CharField(max_length=200)
    checkpoint_path = models.CharField(max_length=300, help_text="Storage-relative checkpoint folder.")
    config = models.JSONField(default=dict)
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def rlinf_match(self) -> RLinfMatch | None:
        """Whether RLinf's own ResNetRewardModel scores this model's files as the service does (None: not a
        ResNet); training.resnet.rlinf_match."""
        return rlinf_match_for(self.kind, self.config)

    @property
    def ood_panel(self) -> dict | None:
        """The off-distribution probes fitted with the model's OOD statistics (training.resnet.ood), or None (a
        VLM, or a ResNet trained before they were fitted)."""
        if self.kind != "resnet":
            return None
        from .resnet.ood_panel import read_ood_panel
        from .storage import local_path

        return read_ood_panel(local_path(self.checkpoint_path))


class LabelQueueItem(models.Model):
    """A frame worth labeling next (training/queue/ranking.py): recomputed after each training job and on
    demand; `reasons` says why it was chosen. Labels made from the queue are ordinary human labels."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="label_queue")
    step = models.ForeignKey("labeling.Step", on_delete=models.CASCADE, related_name="+")
    model = models.ForeignKey(TrainedModel, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    rank = models.PositiveIntegerField()
    score = models.FloatField()
    probability = models.FloatField()
    reasons = models.JSONField(default=list)
    pinned = models.BooleanField(
        default=False, help_text="Pushed to the head by an alarm; kept there by recomputes until labeled."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "rank"]
        constraints = [models.UniqueConstraint(fields=["project", "step"], name="label_queue_one_item_per_step")]


class RetrainPolicy(models.Model):
    """Train-to-target loop of a project: retrain after N new human labels on a fresh snapshot, and
    redeploy a deployment when the new model beats the served one on a fixed evaluation split."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="retrain_policy")
    retrain_after_labels = models.PositiveIntegerField(
        default=0, help_text="New human labels that start a job (0 = off)."
    )
    job_config = models.JSONField(default=dict, blank=True, help_text="ResNet job config of automatic jobs.")
    redeploy = models.CharField(max_length=100, blank=True, help_text="Deployment to switch to a better model.")
    eval_snapshot = models.ForeignKey(
        DatasetSnapshot, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Fixed evaluation split (the first automatic snapshot when empty).",
    )  # fmt: skip
    labels_at_last_job = models.PositiveIntegerField(default=0)
    last_job = models.ForeignKey(TrainingJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    last_comparison = models.JSONField(default=dict, blank=True, help_text="Old vs new model on the fixed split.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "retrain policies"


class LabelEfficiency(models.Model):
    """The last label-efficiency measurement of a project (bench/active.py --project, or
    `manage.py label_efficiency`): validation accuracy against labels for the ranked queue and for random
    order, and the labels each needed to reach 95% of the accuracy all labels give."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="label_efficiency")
    result = models.JSONField(default=dict, help_text="bench/active.py's JSON result.")
    command = models.CharField(max_length=500, blank=True, help_text="The command that measured it.")
    measured_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "label efficiencies"
