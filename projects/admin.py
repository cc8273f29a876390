"""Projects with their members, and agents: a new agent's token is made here and shown once, tokens are
rotated here. An agent's deployments are Deployment.agents (the serving app's grant); the form edits them from
this side through the relation, so this app names no serving module."""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.widgets import FilteredSelectMultiple

from . import services
from .access import DEFAULT_SCOPES
from .models import Agent, AgentScope, Membership, Project
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
