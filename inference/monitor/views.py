"""Reward-hacking monitor endpoints (thin): the deployment health endpoint an RL run polls, the monitor
JSON, and the monitor page with its settings form and alarm acknowledgement."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import APIView

from inference import permissions as inference_perms
from projects import access
from projects.gate.auth import MONITOR_AUTHENTICATION

from ..models import Deployment, DeploymentMonitor
from . import selectors as monitor_selectors
from . import services as monitor_store


def _hours(request) -> float:
    raw = request.GET.get("hours", "1")
    try:
        hours = float(raw)
    except ValueError:
        raise exceptions.ValidationError({"hours": f"must be a number of hours, got {raw!r}"}) from None
    if not 0.01 <= hours <= monitor_selectors.MAX_HOURS:
        raise exceptions.ValidationError({"hours": f"must be between 0.01 and {monitor_selectors.MAX_HOURS}"})
    return hours


def _visible(request, name: str) -> Deployment:
    """The deployment, if the caller may see it (404 otherwise, as for a missing one)."""
    deployment = Deployment.objects.select_related("trained_model").filter(name=name).first()
    not_found = f"no deployment named {name!r}"
    if deployment is None:
        raise exceptions.NotFound(not_found)
    access.require(request.user, inference_perms.DEPLOYMENT_VIEW, deployment, not_found=not_found)
    return deployment


class DeploymentHealthView(APIView):
    """Health and reward-hacking alarm of a deployment: an RL run polls it and stops itself on an alarm
    (with its rewards token; a trusted network's tokenless requests do not reach it: docs/operations.md, TRUSTED_CIDRS)."""

    authentication_classes = MONITOR_AUTHENTICATION

    @extend_schema(
        operation_id="deployment_health",
        summary="Deployment health and reward-hacking alarm",
        description=(
            "`status` is the workers' health; `alarm` is true once the false-success rate (model says "
            "success, env says no) stayed above the deployment's threshold for its hold period, until a "
            "person acknowledges it on the monitor page. `ok` is healthy and no alarm."
        ),
        responses={200: dict},
    )
    def get(self, request, name: str):
        deployment = _visible(request, name)
        state = monitor_selectors.alarm_state(deployment)
        return Response(
            {
                "deployment": deployment.name,
                "status": deployment.status,
                "error": deployment.error,
                "version": deployment.version,
                "ok": deployment.status == Deployment.Status.HEALTHY and not state["alarm"],
                **state,
            }
        )


class DeploymentMonitorView(APIView):
    authentication_classes = MONITOR_AUTHENTICATION

    @extend_schema(
        operation_id="deployment_monitor",
        summary="Reward-hacking monitor data: rates over time, per run, distributions, per-step success",
        parameters=[OpenApiParameter("hours", float, description="Period to show (0.01 to 48 hours, default 1).")],
        responses={200: dict},
    )
    def get(self, request, name: str):
        deployment = _visible(request, name)
        return Response(monitor_selectors.monitor_data(deployment, hours=_hours(request)))


class MonitorSettingsForm(forms.ModelForm):
    class Meta:
        model = DeploymentMonitor
        fields = ["enabled", "false_success_threshold", "hold_s", "window_s", "min_items"]

    def clean_false_success_threshold(self):
        value = self.cleaned_data["false_success_threshold"]
        if not 0.0 <= value <= 1.0:
            raise forms.ValidationError("the threshold is a rate between 0 and 1")
        return value

    def clean_hold_s(self):
        value = self.cleaned_data["hold_s"]
        if not 0.0 <= value <= 7 * 24 * 3600:
            raise forms.ValidationError("hold between 0 seconds and a week")
        return value

    def clean_window_s(self):
        value = self.cleaned_data["window_s"]
        if not 1.0 <= value <= 24 * 3600:
            raise forms.ValidationError("window between 1 second and a day")
        return value


@login_required
def monitor_page(request, name: str):
    deployment = get_object_or_404(Deployment.objects.select_related("trained_model"), name=name)
    access.require_page(request, inference_perms.DEPLOYMENT_VIEW, deployment)
    row = monitor_selectors.monitor_row(deployment)
    form = MonitorSettingsForm(instance=row)
    if request.method == "POST":
        access.require_page(request, inference_perms.DEPLOY, deployment)  # the project's managers
        if request.POST.get("action") == "acknowledge":
            monitor_store.alarm_acknowledge(deployment=deployment)
            messages.success(request, "Alarm acknowledged.")
            return redirect("deployment-monitor", name=name)
        else:
            form = MonitorSettingsForm(request.POST, instance=row)
            if form.is_valid():
                form.save()
                messages.success(request, "Monitor settings saved.")
                return redirect("deployment-monitor", name=name)
    return render(
        request,
        "inference/monitor.html",
        {
            "deployment": deployment,
            "monitor": row,
            "form": form,
            "frames": monitor_selectors.disagreeing_frames(deployment),
            "queue_project": deployment.project_id or deployment.trained_model.project_id,
            "page_data": monitor_selectors.monitor_data(deployment, hours=1.0),
        },
    )
