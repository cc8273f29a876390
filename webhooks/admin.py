"""Admin: register webhooks per project, read (and retry) their delivery log."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages

from .events import EVENTS
from .models import Webhook, WebhookDelivery
from .services import delivery_retry
from .targets import TargetRefused, target_check


class WebhookForm(forms.ModelForm):
    events = forms.MultipleChoiceField(choices=list(EVENTS.items()), widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = Webhook
        fields = ["project", "url", "events", "active", "description", "secret"]

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        try:
            target_check(url, allow_private=settings.WEBHOOK_ALLOW_PRIVATE_TARGETS)
        except TargetRefused as exc:
            raise forms.ValidationError(str(exc)) from None
        return url


class DeliveryInline(admin.TabularInline):
    model = WebhookDelivery
    extra = 0
    can_delete = False
    max_num = 0
    readonly_fields = ("created_at", "event", "status", "attempts", "response_status", "error")
    fields = readonly_fields
    ordering = ["-created_at"]
    show_change_link = True

    def get_queryset(self, request):
        return super().get_queryset(request).order_by("-created_at")


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    form = WebhookForm
    list_display = ["url", "project", "active", "event_list", "created_at"]
    list_filter = ["active", "project"]
    search_fields = ["url", "description"]
    inlines = [DeliveryInline]

    @admin.display(description="events")
    def event_list(self, obj):
        return ", ".join(obj.events)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "event", "webhook", "status", "attempts", "response_status", "next_attempt_at"]
    list_filter = ["status", "event", "webhook__project"]
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]
    actions = ["retry"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Deliver again")
    def retry(self, request, queryset):
        for delivery in queryset:
            delivery_retry(delivery=delivery)
        messages.info(request, f"{queryset.count()} deliveries queued again.")
