"""Server-rendered pages: the deployments list, deploying a trained model, and each deployment's served-frames
gallery."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from inference import permissions as inference_perms
from labeling import permissions as labeling_perms
from projects import access
from training.evaluation.model_evaluation import model_sanity
from training.families import takes_windows
from training.models import TrainedModel

from .. import selectors, services
from ..models import Deployment, ServedFrame
from ..vlm.prompt_notes import prompt_mismatch_notes
from .forms import DeployForm, suggested_name


@login_required
def deployment_list(request):
    deployments = list(selectors.deployment_list().filter(access.visible_deployment_filter(request.user)))
    notes = prompt_mismatch_notes([d.pk for d in deployments if takes_windows(d.trained_model.kind)])
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
    access.require_page(request, inference_perms.DEPLOYMENT_VIEW, deployment)
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
    access.require_page(request, inference_perms.DEPLOYMENT_VIEW, frame.deployment)
    access.require_page(request, labeling_perms.LABEL, frame.deployment.project_id)
    value = request.POST.get("value", "")
    try:
        episode = services.served_frame_label(frame=frame, value=value, user=request.user)
    except services.DeploymentError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Frame {frame.pk} labeled {value} and added to {episode.project} as an episode.")
    return redirect("deployment-gallery", name=name)


@login_required
def deploy_model(request, model_id: int):
    """Deploy a trained model from the app: its metrics beside the settings that apply to its kind, the
    threshold carried from the evaluation page's slider (`?threshold=`)."""
    model = get_object_or_404(TrainedModel.objects.select_related("project", "snapshot"), pk=model_id)
    access.require_page(request, inference_perms.DEPLOY_PROJECT, model.project)
    taken = None
    if request.method == "POST":
        form = DeployForm(request.POST, trained_model=model)
        taken = _switchable_namesake(request, form, model)
        if form.is_valid():
            try:
                deployment = services.deployment_create(
                    name=form.cleaned_data["name"], trained_model=model, actor=request.user, **form.settings()
                )
            except services.DeploymentError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(
                    request,
                    f"{model.name} deployed as {deployment.name}: the inference workers load it now; "
                    f"RL workers ask POST /api/deployments/{deployment.name}/rewards.",
                )
                return redirect("deployments")
    else:
        initial: dict[str, object] = {"name": suggested_name(model)}
        threshold = _threshold_param(request.GET.get("threshold"))
        if threshold is not None:
            initial["threshold"] = threshold
        form = DeployForm(initial=initial, trained_model=model)
    context = {
        "model": model,
        "form": form,
        "taken": taken,
        "sanity": model_sanity(model, compute=False),  # what is on disk: the deploy page never scores a split
        "metrics": _shown_metrics(model.metrics),
    }
    return render(request, "inference/deploy.html", context, status=400 if form.errors else 200)


def _switchable_namesake(request, form: DeployForm, model: TrainedModel) -> Deployment | None:
    """The deployment already under the posted name, when the person may switch it to this model: the form then
    offers the switch instead of only saying the name is taken."""
    name = str(form.data.get("name", "")).strip()
    deployment = Deployment.objects.select_related("trained_model").filter(name=name).first() if name else None
    if deployment is None or not access.can(request.user, inference_perms.DEPLOY, deployment):
        return None
    if deployment.trained_model.kind != model.kind or (deployment.project_id or model.project_id) != model.project_id:
        return None
    form.is_valid()
    form.errors.pop("name", None)  # the offer below says it, with what to do
    form.add_error(
        "name",
        f"{name} already exists (serving {deployment.trained_model.name}, {deployment.version_label}): switch it to "
        "this model below, or choose another name.",
    )
    return deployment


def _threshold_param(raw: str | None) -> float | None:
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    return value if value is not None and 0.0 <= value <= 1.0 else None


def _shown_metrics(metrics: dict) -> list[tuple[str, str]]:
    """The model's numeric metrics, formatted (`val_acc: 0.967` -> ("val acc", "0.967"))."""
    shown = []
    for name, value in sorted((metrics or {}).items()):
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        shown.append((name.replace("_", " "), f"{value:.3f}" if isinstance(value, float) else str(value)))
    return shown
