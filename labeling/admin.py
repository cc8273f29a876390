from django.contrib import admin

from .models import Episode, Frame, FrameLabel, ImportJob, LabelChange, ProposalJob, Step, WindowLabel


class StepInline(admin.TabularInline):
    model = Step
    readonly_fields = ("index", "reward", "terminated", "truncated", "env_success")
    fields = readonly_fields
    extra = 0
    can_delete = False
    show_change_link = True
    max_num = 0


@admin.register(Episode)
class EpisodeAdmin(admin.ModelAdmin):
    list_display = ["uuid", "project", "source", "agent", "env_id", "num_steps", "success", "status", "created_at"]
    list_filter = ["project", "source", "status", "success", "agent"]
    search_fields = ["uuid", "env_id", "agent__name"]
    readonly_fields = ["uuid", "num_steps", "created_at", "finished_at"]
    inlines = [StepInline]


@admin.register(Step)
class StepAdmin(admin.ModelAdmin):
    list_display = ["episode", "index", "reward", "terminated", "truncated", "env_success"]
    list_filter = ["env_success", "terminated", "truncated"]
    search_fields = ["episode__uuid"]
    raw_id_fields = ["episode"]


@admin.register(Frame)
class FrameAdmin(admin.ModelAdmin):
    list_display = ["step", "camera", "width", "height", "image"]
    list_filter = ["camera"]
    raw_id_fields = ["step"]


@admin.register(FrameLabel)
class FrameLabelAdmin(admin.ModelAdmin):
    list_display = ["episode", "step", "value", "source", "status", "author", "updated_at"]
    list_filter = ["project", "value", "source", "status"]
    search_fields = ["episode__uuid", "author__username"]
    raw_id_fields = ["step", "episode"]


@admin.register(WindowLabel)
class WindowLabelAdmin(admin.ModelAdmin):
    list_display = ["episode", "start", "end", "value", "source", "status", "score", "author", "updated_at"]
    list_filter = ["project", "value", "source", "status"]
    search_fields = ["episode__uuid", "author__username"]
    raw_id_fields = ["episode"]


@admin.register(LabelChange)
class LabelChangeAdmin(admin.ModelAdmin):
    list_display = [
        "at",
        "project",
        "episode",
        "kind",
        "action",
        "source",
        "start",
        "end",
        "old_value",
        "new_value",
        "author",
    ]
    list_filter = ["project", "kind", "action", "source"]
    search_fields = ["episode__uuid", "author__username"]
    raw_id_fields = ["episode"]


class _JobAdmin(admin.ModelAdmin):
    """Read-only job rows with their progress (the worker advances them)."""

    list_display = ["id", "project", "status", "progress", "created_by", "created_at", "finished_at"]
    list_filter = ["status", "project"]
    search_fields = ["project__name", "created_by__username", "error"]

    @admin.display(description="Progress")
    def progress(self, obj) -> str:
        return f"{obj.done}/{obj.total} ({obj.percent}%)"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ImportJob)
class ImportJobAdmin(_JobAdmin):
    """Jobs made by the import page."""

    readonly_fields = [f.name for f in ImportJob._meta.fields]


@admin.register(ProposalJob)
class ProposalJobAdmin(_JobAdmin):
    """Jobs started by "Generate proposals" (or the API)."""

    readonly_fields = [f.name for f in ProposalJob._meta.fields]
