from django import forms
from django.contrib import admin
from django.utils.html import format_html

from . import services
from .models import Deployment, DeploymentEvent, DeploymentMonitor, ServedFrame


class DeploymentForm(forms.ModelForm):
    class Meta:
        model = Deployment
        fields = [
            "name",
            "trained_model",
            "project",
            *services.SETTING_FIELDS,
            "max_batch_size",
            "max_wait_ms",
            "sample_every",
            "aliases",
            "chat_prompt",
            "inference_precision",
        ]

    OPTIONAL = (
        "gt_success_bonus",
        "aliases",
        "chat_prompt",
        "inference_precision",
    )  # left out of a form, they keep their defaults

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in self.OPTIONAL:
            self.fields[name].required = False

    def clean(self):
        super().clean()
        data = self.cleaned_data
        for name in self.OPTIONAL:
            if data.get(name) in (None, ""):
                data[name] = services.deployment_field_default(name)
        values = {f: data[f] for f in (*services.SETTING_FIELDS, "max_batch_size", "max_wait_ms") if f in data}
        try:
            services.check_settings(values)
            if data.get("trained_model") is not None:
                services.check_precision(data["trained_model"].kind, data["inference_precision"])
            if self.instance.pk is None or data.get("inference_precision") != self.instance.inference_precision:
                services.check_precision_host(data.get("inference_precision", ""))
        except services.DeploymentError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    form = DeploymentForm
    list_display = [
        "name",
        "trained_model",
        "status",
        "version",
        "reward_mode",
        "reward_type",
        "threshold",
        "max_batch_size",
        "max_wait_ms",
        "sample_every",
        "inference_precision",
        "updated_at",
    ]
    list_filter = ["status", "reward_mode", "reward_type"]
    search_fields = ["name", "trained_model__name"]
    readonly_fields = ["status", "error", "version", "revision", "paused", "created_at", "updated_at"]
    actions = ["reload_models"]

    def save_model(self, request, obj, form, change):
        """Through the services, so that switching the model bumps the version (workers reload)."""
        values = {
            f: form.cleaned_data[f]
            for f in (*services.SETTING_FIELDS, *services.OTHER_FIELDS)
            if f in form.cleaned_data
        }
        model = form.cleaned_data["trained_model"]
        if change:
            saved = services.deployment_update(
                deployment=Deployment.objects.get(pk=obj.pk), trained_model=model, actor=request.user, **values
            )
        else:
            saved = services.deployment_create(
                name=form.cleaned_data["name"], trained_model=model, actor=request.user, **values
            )
        obj.pk = saved.pk
        obj.refresh_from_db()

    @admin.action(description="Reload the model in the inference workers")
    def reload_models(self, request, queryset):
        for deployment in queryset:
            services.deployment_reload(deployment=deployment, actor=request.user)
        self.message_user(request, f"{queryset.count()} deployment(s) will reload.")


@admin.register(ServedFrame)
class ServedFrameAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "thumbnail",
        "deployment",
        "probability",
        "success",
        "model_version",
        "label_value",
        "created_at",
    ]
    list_filter = ["deployment", "success", "label_value"]
    readonly_fields = ["thumbnail", "labeled_episode"]

    @admin.display(description="frame")
    def thumbnail(self, obj):
        return format_html('<img src="{}" style="height:48px">', obj.image.url) if obj.image else ""


@admin.register(DeploymentMonitor)
class DeploymentMonitorAdmin(admin.ModelAdmin):
    """Reward-hacking monitor settings; the alarm state is the monitor's own."""

    list_display = ["deployment", "enabled", "false_success_threshold", "hold_s", "alarm_since", "alarm_rate"]
    list_filter = ["enabled"]
    search_fields = ["deployment__name", "alarm_run"]
    readonly_fields = ["deployment", "alarm_since", "alarm_rate", "alarm_run", "updated_at"]

    def has_add_permission(self, request):
        return False  # one row per deployment, made on first use


@admin.register(DeploymentEvent)
class DeploymentEventAdmin(admin.ModelAdmin):
    """Deployments' history: who created, switched, changed, paused and deleted them (written by the services)."""

    list_display = ["created_at", "deployment_name", "action", "actor", "revision"]
    list_filter = ["action"]
    search_fields = ["deployment_name", "actor"]
    readonly_fields = [f.name for f in DeploymentEvent._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
