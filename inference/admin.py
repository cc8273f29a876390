from django.contrib import admin, messages
from django.utils.html import format_html

from . import services
from .models import Deployment, ServedFrame


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
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
        "updated_at",
    ]
    list_filter = ["status", "reward_mode", "reward_type"]
    search_fields = ["name", "trained_model__name"]
    readonly_fields = ["status", "error", "version", "created_at", "updated_at"]
    autocomplete_fields = []
    actions = ["reload_models"]

    def save_model(self, request, obj, form, change):
        values = {
            f: form.cleaned_data[f]
            for f in (*services.SETTING_FIELDS, *services.OTHER_FIELDS)
            if f in form.cleaned_data
        }
        try:
            if change:
                services.deployment_update(
                    deployment=Deployment.objects.get(pk=obj.pk),
                    trained_model=form.cleaned_data["trained_model"],
                    **values,
                )
            else:
                created = services.deployment_create(
                    name=obj.name, trained_model=form.cleaned_data["trained_model"], **values
                )
                obj.pk = created.pk
        except services.DeploymentError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        obj.refresh_from_db() if obj.pk else None

    @admin.action(description="Reload the model in the inference workers")
    def reload_models(self, request, queryset):
        for deployment in queryset:
            services.deployment_reload(deployment=deployment)
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
