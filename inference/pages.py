"""Server-rendered pages: the deployments list and each deployment's served-frames gallery."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from labeling import access

from . import selectors, services
from .models import Deployment, ServedFrame
from .vlm.prompt_notes import prompt_mismatch_notes


@login_required
def deployment_list(request):
    deployments = list(selectors.deployment_list().filter(access.visible_deployment_filter(request.user)))
    notes = prompt_mismatch_notes([d.pk for d in deployments if d.trained_model.kind == "vlm"])
    for deployment in deployments:
        deployment.prompt_note = notes.get(deployment.pk)  # type: ignore[attr-defined]
    return render(
        request,
        "inference/deployment_list.html",
        {"deployments": deployments, "workers": selectors.workers_alive()},
    )


@login_required
def gallery(request, name: str):
    deployment = get_object_or_404(Deployment.objects.select_related("trained_model"), name=name)
    access.require_page(request, access.DEPLOYMENT_VIEW, deployment)
    return render(
        request,
        "inference/gallery.html",
        {
            "deployment": deployment,
            "judged_success": selectors.served_frames(deployment=deployment, success=True),
            "judged_fail": selectors.served_frames(deployment=deployment, success=False),
        },
    )


@login_required
@require_POST
def gallery_label(request, name: str, frame_id: int):
    frame = get_object_or_404(ServedFrame.objects.select_related("deployment"), pk=frame_id, deployment__name=name)
    access.require_page(request, access.DEPLOYMENT_VIEW, frame.deployment)
    access.require_page(request, access.LABEL, frame.deployment.project_id)
    value = request.POST.get("value", "")
    try:
        episode = services.served_frame_label(frame=frame, value=value, user=request.user)
    except services.DeploymentError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Frame {frame.pk} labeled {value} and added to {episode.project} as an episode.")
    return redirect("deployment-gallery", name=name)
