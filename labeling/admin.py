from django import forms
from django.contrib import admin, messages
from django.contrib.admin.widgets import FilteredSelectMultiple

from projects.access import DEFAULT_SCOPES
from projects.models import Agent, AgentScope, Membership, Project

from .ingest import services
from .models import Episode, Frame, FrameLabel, ImportJob, LabelChange, ProposalJob, Step, WindowLabel
from .selectors import agent_deployment_model


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "camera_views", "window_size", "target_success_frames", "target_fail_frames", "created_at"]
    search_fields = ["name", "task_description"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["project", "user", "role", "created_at"]
    list_filter = ["project", "role"]
    search_fields = ["user__username", "project__name"]
    autocomplete_fields = ["user", "project"]


class AgentForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=AgentScope.choices,
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="What the token may do; give an RL worker only rewards. Left empty on a new token: its kind's "
        + "; ".join(f"{Agent.Kind(kind).label}: {', '.join(scopes)}" for kind, scopes in DEFAULT_SCOPES.items())
        + ".",
    )

    # The grant is Deployment.agents (it points down from the serving app); the form edits it from this side.
    deployments = forms.ModelMultipleChoiceField(
        queryset=agent_deployment_model()._default_manager.all(),
        required=False,
        widget=FilteredSelectMultiple("deployments", is_stacked=False),
        help_text="Deployments it may ask for rewards (besides those of its projects).",
    )

    class Meta:
        model = Agent
        fields = ["name", "kind", "is_active", "scopes", "all_projects", "projects"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["deployments"].initial = self.instance.deployments.all()


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = ["name", "kind", "scope_list", "all_projects", "token_prefix", "is_active", "last_seen_at"]
    list_filter = ["kind", "is_active", "all_projects"]
    search_fields = ["name", "token_prefix"]
    readonly_fields = ["token_prefix", "last_seen_at", "created_at"]
    filter_horizontal = ["projects"]
    actions = ["rotate_tokens"]

    @admin.display(description="Scopes")
    def scope_list(self, obj) -> str:
        return ", ".join(obj.scopes or []) or "none"

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        agent, token = services.agent_create(  # no scope ticked: the kind's (access.DEFAULT_SCOPES)
            name=obj.name, kind=obj.kind, scopes=list(obj.scopes) or None, all_projects=obj.all_projects
        )
        obj.pk = agent.pk
        obj.token_hash, obj.token_prefix, obj.scopes = agent.token_hash, agent.token_prefix, agent.scopes
        self.message_user(
            request,
            f"Token for {agent.name} with scopes {', '.join(agent.scopes) or 'none'} (shown once, copy it now): {token}",
            messages.WARNING,
        )

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        form.instance.deployments.set(form.cleaned_data["deployments"])

    @admin.action(description="Issue new tokens (old ones stop working)")
    def rotate_tokens(self, request, queryset):
        for agent in queryset:
            token = services.agent_rotate_token(agent=agent)
            self.message_user(request, f"New token for {agent.name} (shown once): {token}", messages.WARNING)


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
