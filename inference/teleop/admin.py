"""Admin for teleop sessions."""

from django.contrib import admin

from .models import TeleopSession


@admin.register(TeleopSession)
class TeleopSessionAdmin(admin.ModelAdmin):
    list_display = [
        "id", "agent", "project", "deployment_name", "policy", "is_live", "step_count", "inferred_count",
        "dropped_frames", "label_count", "started_at", "ended_at",
    ]  # fmt: skip
    list_filter = ["is_live", "project", "agent", "deployment_name"]
    search_fields = ["agent__name", "project__name", "deployment_name", "env_id"]
    readonly_fields = ["started_at", "last_seen_at", "ended_at", "stats"]
    filter_horizontal = ["episodes"]
    date_hierarchy = "started_at"
