"""Admin: snapshots, jobs (with cancel, retry and delete-with-files actions) and trained models."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils.html import format_html

from . import services
from .models import (
    DatasetSnapshot,
    JobMetric,
    LabelEfficiency,
    LabelQueueItem,
    RetrainPolicy,
    TrainedModel,
    TrainingJob,
)


class NoAddMixin:
    """Rows are made by the training pages, API and commands (validated, files written), not by hand."""

    def has_add_permission(self, request):
        return False


@admin.register(DatasetSnapshot)
class DatasetSnapshotAdmin(NoAddMixin, admin.ModelAdmin):
    list_display = ["__str__", "project", "number", "status", "created_by", "created_at"]
    list_filter = ["status", "project"]
    search_fields = ["project__name"]
    readonly_fields = [
        "project",
        "number",
        "status",
        "options",
        "stats",
        "folder",
        "error",
        "progress",
        "frames_done",
        "frames_total",
        "attempt",
        "celery_task_id",
        "enqueued_at",
        "heartbeat_at",
        "created_by",
        "created_at",
        "started_at",
        "finished_at",
    ]


@admin.register(TrainingJob)
class TrainingJobAdmin(NoAddMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "project",
        "kind",
        "status_badge",
        "progress_percent",
        "attempt",
        "created_by",
        "created_at",
        "finished_at",
    ]
    list_filter = ["status", "kind", "project"]
    search_fields = ["name", "project__name", "error"]
    readonly_fields = [
        "project",
        "snapshot",
        "kind",
        "config",
        "status",
        "cancel_requested",
        "progress",
        "eta_seconds",
        "summary",
        "log",
        "error",
        "error_detail",
        "attempt",
        "celery_task_id",
        "enqueued_at",
        "worker",
        "heartbeat_at",
        "created_by",
        "created_at",
        "started_at",
        "finished_at",
    ]
    actions = ["cancel_jobs", "retry_jobs", "delete_jobs_with_files"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # deleting must also remove files: use the action below
        return actions

    @admin.display(description="status", ordering="status")
    def status_badge(self, job):
        return format_html('<a href="/jobs/{}/">{}</a>', job.pk, job.status)

    @admin.display(description="progress")
    def progress_percent(self, job):
        return f"{job.progress * 100:.0f}%"

    def _apply(self, request, queryset, action, verb):
        done, errors = 0, []
        for job in queryset:
            try:
                action(job=job)
                done += 1
            except services.JobError as exc:
                errors.append(str(exc))
        if done:
            self.message_user(request, f"{verb} {done} job(s).", messages.SUCCESS)
        for error in errors:
            self.message_user(request, error, messages.WARNING)

    @admin.action(description="Cancel selected jobs")
    def cancel_jobs(self, request, queryset):
        self._apply(request, queryset, services.job_cancel, "Cancelled")

    @admin.action(description="Retry selected jobs")
    def retry_jobs(self, request, queryset):
        self._apply(request, queryset, services.job_retry, "Queued again")

    @admin.action(description="Delete selected jobs with their checkpoints")
    def delete_jobs_with_files(self, request, queryset):
        self._apply(request, queryset, services.job_delete, "Deleted")


@admin.register(TrainedModel)
class TrainedModelAdmin(NoAddMixin, admin.ModelAdmin):
    list_display = ["id", "name", "project", "kind", "job", "checkpoint_path", "created_at"]
    list_filter = ["kind", "project"]
    search_fields = ["name", "project__name", "checkpoint_path"]


@admin.register(JobMetric)
class JobMetricAdmin(NoAddMixin, admin.ModelAdmin):
    list_display = ["job", "kind", "step", "epoch", "values", "at"]
    list_filter = ["kind"]


@admin.register(LabelQueueItem)
class LabelQueueItemAdmin(NoAddMixin, admin.ModelAdmin):
    """Read-only: the queue is recomputed after training and on demand (training/queue/ranking.py)."""

    list_display = ["project", "rank", "step", "score", "probability", "model", "created_at"]
    list_filter = ["project"]
    search_fields = ["project__name", "step__episode__uuid"]
    readonly_fields = [f.name for f in LabelQueueItem._meta.fields]

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(LabelEfficiency)
class LabelEfficiencyAdmin(NoAddMixin, admin.ModelAdmin):
    """Read-only: written by `bench/active.py --project` (training/queue/efficiency.py)."""

    list_display = ["project", "command", "measured_at"]
    readonly_fields = ["project", "result", "command", "measured_at"]

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(RetrainPolicy)
class RetrainPolicyAdmin(NoAddMixin, admin.ModelAdmin):
    list_display = ["project", "retrain_after_labels", "redeploy", "labels_at_last_job", "last_job", "updated_at"]
    search_fields = ["project__name", "redeploy"]
    raw_id_fields = ["eval_snapshot"]
    readonly_fields = ["project", "labels_at_last_job", "last_job", "last_comparison", "updated_at"]
