"""A deployment's page: what it serves (v1, v2, ...), switching it to another model, its reward settings, pausing,
deleting (after a confirmation) and who did what. Every change goes through `services`, which keeps the history."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from inference import permissions as inference_perms
from projects import access
from training.models import TrainedModel

from .. import services
from ..models import Deployment
from .forms import DeploymentSettingsForm


def switch_candidates(deployment: Deployment):
    """The models the deployment may serve instead: its project's, of the same kind, newest first."""
    project_id = deployment.project_id or deployment.trained_model.project_id
    return (
        TrainedModel.objects.filter(project_id=project_id, kind=deployment.trained_model.kind)
        .exclude(pk=deployment.trained_model_id)
        .order_by("-created_at", "-pk")
    )


def _deployment(request, name: str, perm=inference_perms.DEPLOYMENT_VIEW) -> Deployment:
    deployment = get_object_or_404(Deployment.objects.select_related("trained_model", "project"), name=name)
    access.require_page(request, perm, deployment)
    return deployment


def _page(request, deployment: Deployment, form: DeploymentSettingsForm | None = None, status: int = 200):
    can_manage = access.can(request.user, inference_perms.DEPLOY, deployment)
    context = {
        "deployment": deployment,
        "can_manage": can_manage,
        "settings_form": form or (DeploymentSettingsForm(deployment=deployment) if can_manage else None),
        "candidates": list(switch_candidates(deployment)[:50]) if can_manage else [],
        "events": list(deployment.events.all()[:100]),
    }
    return render(request, "inference/deployment.html", context, status=status)


@login_required
def deployment_page(request, name: str) -> HttpResponse:
    return _page(request, _deployment(request, name))


@login_required
@require_POST
def deployment_switch(request, name: str) -> HttpResponse:
    """Serve another model of the project (from this page, the new model's evaluation page or the deploy form)."""
    deployment = _deployment(request, name, inference_perms.DEPLOY)
    raw = request.POST.get("model", "")
    model = switch_candidates(deployment).filter(pk=int(raw)).first() if raw.isdigit() and len(raw) < 12 else None
    if model is None:
        if raw == str(deployment.trained_model_id):
            messages.info(request, f"{deployment.name} already serves {deployment.trained_model.name}.")
            return redirect("deployment-page", name=name)
        messages.error(request, "Choose a model of the deployment's project and kind to switch to.")
        return redirect("deployment-page", name=name)
    access.require_page(request, inference_perms.DEPLOY_PROJECT, model.project)
    try:
        deployment = services.deployment_update(deployment=deployment, trained_model=model, actor=request.user)
    except services.DeploymentError as exc:
        messages.error(request, f"Not switched: {exc}")
    else:
        messages.success(
            request,
            f"{deployment.name} now serves {model.name} as {deployment.version_label}: the inference workers load it "
            "while requests wait, none is dropped.",
        )
    return redirect("deployment-page", name=name)


@login_required
@require_POST
def deployment_settings(request, name: str) -> HttpResponse:
    deployment = _deployment(request, name, inference_perms.DEPLOY)
    form = DeploymentSettingsForm(request.POST, deployment=deployment)
    if form.is_valid():
        try:
            services.deployment_update(deployment=deployment, actor=request.user, **form.settings())
        except services.DeploymentError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Settings of {deployment.name} saved; the next requests use them.")
            return redirect("deployment-page", name=name)
    return _page(request, deployment, form, status=400)


@login_required
@require_POST
def deployment_pause(request, name: str) -> HttpResponse:
    deployment = _deployment(request, name, inference_perms.DEPLOY)
    paused = request.POST.get("paused") == "1"
    services.deployment_pause(deployment=deployment, paused=paused, actor=request.user)
    if paused:
        messages.success(request, f"{deployment.name} is paused: reward requests answer 503 saying so.")
    else:
        messages.success(request, f"{deployment.name} is serving again.")
    return redirect("deployment-page", name=name)


@login_required
def deployment_delete(request, name: str) -> HttpResponse:
    """GET: the confirmation (what goes with it); POST with the name typed again: delete."""
    deployment = _deployment(request, name, inference_perms.DEPLOY)
    error = ""
    if request.method == "POST":
        if request.POST.get("confirm_name", "").strip() == deployment.name:
            services.deployment_delete(deployment=deployment, actor=request.user)
            messages.success(request, f"Deployment {name} deleted; clients asking for it get 404.")
            return redirect("deployments")
        error = f"Type the deployment's name, {deployment.name}, to delete it."
    context = {
        "deployment": deployment,
        "served_frames": deployment.served_frames.count(),
        "error": error,
        "cancel_url": reverse("deployment-page", args=[name]),
    }
    return render(request, "inference/deployment_delete.html", context, status=400 if error else 200)
