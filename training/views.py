"""Server-rendered training pages; the live parts (curves, evaluation plots) are in frontend/src/pages."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from common.file_streaming import stream_response
from common.jobs.payload import job_progress_payload
from common.paging import list_page
from labeling.ingest.selectors import stored_frame_width
from projects import access
from projects.models import Project
from training import permissions as training_perms
from training.evaluation.model_evaluation import EvaluationPending, EvaluationUnavailable, evaluation_data
from training.evaluation.precompute import evaluation_request

from . import selectors, services
from .families import FAMILIES, default_config
from .forms import JobForm, SnapshotForm
from .jobs.limits import paths_relative
from .model_export import ModelExportError, model_archive_stream
from .models import DatasetSnapshot, ModelKind, TrainedModel, TrainingJob
from .page_data import EvaluationPageData, JobPageData, TrainingPageData
from .presets import PRESETS
from .queue.efficiency import label_efficiency_data, measure_command
from .services import JobError
from .snapshots.services import SnapshotError, snapshot_archive_stream, snapshot_delete, snapshot_start
from .storage import local_path
from .vlm.evaluation import trend_evaluation_rows


@login_required
def project_training(request, pk: int):
    """Snapshots, jobs and models of a project, with the forms that create them."""
    project = _project(request, pk)
    job_form = JobForm(project=project, initial=_job_form_initial(request, project))
    return _training_page(request, project, SnapshotForm(project=project), job_form)


def _job_form_initial(request, project: Project) -> dict[str, Any]:
    """The job form's starting values: a preset (`?preset=pickcube`) or an earlier ResNet job's config to change
    (`?from_job=N`, "Train again with changes"); the defaults otherwise."""
    preset = PRESETS.get(request.GET.get("preset", ""))
    if preset is not None:
        return preset.form_initial(stored_frame_width(project=project))
    job_id = request.GET.get("from_job", "")
    job = TrainingJob.objects.filter(project=project, pk=int(job_id)).first() if job_id.isdigit() else None
    if job is None or job.kind != "resnet":
        return {}
    config = dict(job.config)
    size = config.pop("image_size", None) or [3, 128, 128]
    initial = {name: config[name] for name in JobForm.RESNET_FIELDS if name in config}
    initial.update(
        snapshot=job.snapshot_id,
        name=f"{job.name} (changed)",
        image_height=size[1],
        image_width=size[2],
        crop=", ".join(str(v) for v in config.get("crop") or []),
        hidden_dim=config.get("hidden_dim") or 0,
        pretrained_path=config.get("pretrained_path", ""),
        **{name: config[name] for name in JobForm.PARALLEL_FIELDS if name in config},
    )
    return initial


def _project(request, pk: int, perm=training_perms.TRAINING_VIEW) -> Project:
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, perm, project)
    return project


def _training_page(request, project, snapshot_form, job_form, status=200):
    defaults: dict[str, dict[str, Any] | None] = {
        kind: paths_relative(kind, default_config(kind))
        for kind in FAMILIES  # no server path shown
    }
    return render(
        request,
        "training/project_training.html",
        {
            "project": project,
            "snapshots": list_page(
                request.GET, selectors.snapshots_for_project(project), param="snapshots_page", anchor="snapshots"
            ),
            "jobs": list_page(request.GET, selectors.jobs_for_project(project), param="jobs_page", anchor="jobs"),
            "models": list_page(
                request.GET, selectors.models_for_project(project), param="models_page", anchor="models"
            ),
            "snapshot_form": snapshot_form,
            "job_form": job_form,
            "page_data": TrainingPageData(project=project.pk, default_configs=defaults),
            "presets": PRESETS,
        },
        status=status,
    )


@login_required
@require_POST
def snapshot_new(request, pk: int):
    project = _project(request, pk, training_perms.TRAIN)
    form = SnapshotForm(request.POST, project=project)
    if not form.is_valid():
        return _training_page(request, project, form, JobForm(project=project), status=400)
    try:
        snapshot = snapshot_start(project=project, options=form.options(), created_by=request.user)
    except (SnapshotError, ValueError) as exc:
        form.add_error(None, str(exc))
        return _training_page(request, project, form, JobForm(project=project), status=400)
    return redirect("training-snapshot", snapshot_id=snapshot.pk)


@login_required
def snapshot_detail(request, snapshot_id: int):
    """A snapshot's build: a progress bar that refreshes itself while building, then its counts or the reason."""
    snapshot = get_object_or_404(DatasetSnapshot.objects.select_related("project", "created_by"), pk=snapshot_id)
    access.require_page(request, training_perms.TRAINING_VIEW, snapshot.project)
    context = {"project": snapshot.project, "snapshot": snapshot, "progress": job_progress_payload(snapshot)}
    return render(request, "training/snapshot.html", context)


@login_required
@require_POST
def job_new(request, pk: int):
    project = _project(request, pk, training_perms.TRAIN)
    form = JobForm(request.POST, project=project)
    if form.is_valid():
        try:
            job = services.job_create(
                project=project,
                snapshot=form.cleaned_data["snapshot"],
                kind=form.cleaned_data["kind"],
                config=form.config(),
                name=form.cleaned_data["name"],
                created_by=request.user,
            )
        except (ValidationError, ValueError) as exc:
            form.add_error(None, exc.messages[0] if isinstance(exc, ValidationError) else str(exc))
        else:
            messages.success(request, f"Job {job.pk} queued.")
            return redirect("training-job", job_id=job.pk)
    return _training_page(request, project, SnapshotForm(project=project), form, status=400)


@login_required
def snapshot_download(request, snapshot_id: int):
    """The snapshot folder as a zip, streamed as it is zipped (no copy on disk, first byte at once)."""
    snapshot = get_object_or_404(DatasetSnapshot.objects.select_related("project"), pk=snapshot_id)
    return _zip_download(request, snapshot.project, lambda: snapshot_archive_stream(snapshot=snapshot))


def _zip_download(request, project: Project, archive: Callable[[], tuple[str, Iterator[bytes]]]):
    """`archive()`'s zip streamed to a training reader of `project`; 404 with the reason when it cannot be made."""
    access.require_page(request, training_perms.TRAINING_VIEW, project)
    try:
        name, blocks = archive()
    except (SnapshotError, ModelExportError) as exc:
        raise Http404(str(exc)) from None
    return stream_response(request, blocks, content_type="application/zip", attachment=name)


@login_required
@require_POST
def snapshot_remove(request, snapshot_id: int):
    snapshot = get_object_or_404(DatasetSnapshot.objects.select_related("project"), pk=snapshot_id)
    access.require_page(request, training_perms.TRAIN, snapshot.project)
    try:
        snapshot_delete(snapshot=snapshot)
        messages.success(request, f"Snapshot #{snapshot.number} deleted.")
    except SnapshotError as exc:
        messages.error(request, str(exc))
    return redirect("training-project", pk=snapshot.project_id)


@login_required
def job_detail(request, job_id: int):
    job = get_object_or_404(TrainingJob.objects.select_related("project", "snapshot"), pk=job_id)
    access.require_page(request, training_perms.TRAINING_VIEW, job.project)
    return render(
        request,
        "training/job_detail.html",
        {
            "job": job,
            "project": job.project,
            "models": job.models.all(),
            "page_data": JobPageData(job=job.pk, ws=f"/ws/jobs/{job.pk}/", state=selectors.job_state_of(job)),
        },
    )


@login_required
@require_POST
def job_action(request, job_id: int, action: str):
    job = get_object_or_404(TrainingJob.objects.select_related("project", "snapshot"), pk=job_id)
    access.require_page(request, training_perms.TRAIN, job.project)
    project_id = job.project_id
    try:
        if action == "cancel":
            services.job_cancel(job=job)
            messages.success(request, f"Job {job_id}: cancel requested.")
        elif action == "retry":
            services.job_retry(job=job)
            messages.success(request, f"Job {job_id} queued again.")
        elif action == "clone":
            clone = services.job_create(
                project=job.project,
                snapshot=job.snapshot,
                kind=job.kind,
                config=job.config,
                name=job.name,
                created_by=request.user,
            )
            messages.success(
                request, f"Job {clone.pk} queued: job {job_id}'s config on snapshot #{job.snapshot.number}."
            )
            return redirect("training-job", job_id=clone.pk)
        elif action == "delete":
            services.job_delete(job=job)
            messages.success(request, f"Job {job_id} and its files deleted.")
            return redirect("training-project", pk=project_id)
        else:
            raise Http404("unknown action")
    except (JobError, ValueError) as exc:
        messages.error(request, str(exc))
    return redirect("training-job", job_id=job_id)


def _evaluation_page_data(mode, evaluations, project) -> EvaluationPageData:
    return EvaluationPageData(
        mode=mode,
        evaluations=evaluations,
        label_efficiency=label_efficiency_data(project=project),
        label_efficiency_command=measure_command(project),
    )


@login_required
def model_evaluation(request, model_id: int):
    model = get_object_or_404(TrainedModel.objects.select_related("project", "snapshot", "job"), pk=model_id)
    access.require_page(request, training_perms.TRAINING_VIEW, model.project)
    family = FAMILIES.get(model.kind)
    if family is not None and family.evaluation_page != "training-evaluation":  # the family's own page
        return redirect(family.evaluation_page, model_id=model.pk)
    others = TrainedModel.objects.filter(project=model.project, kind=model.kind).exclude(pk=model.pk)
    progress = None
    try:  # never scores here: figures missing on disk (a model older than their precompute) are queued
        data = evaluation_data(model=model, compute=False)
        error = ""
    except EvaluationPending:
        progress = evaluation_request(model=model)
        data, error = None, progress["error"]
    except EvaluationUnavailable as exc:
        data, error = None, str(exc)
    return render(
        request,
        "training/evaluation.html",
        {
            "model": model,
            "project": model.project,
            "others": others,
            "error": error,
            "page_data": _evaluation_page_data("single", [data] if data else [], model.project),
            "compare_url": reverse("training-compare", args=[model.project_id]),
            "can_deploy": access.can(request.user, access.registered("inference.deploy_project"), model.project),
            "progress": progress,
        },
        status=200 if data or (progress and not progress["error"]) else 400,
    )


@login_required
def model_download(request, model_id: int):
    """A model's checkpoint folder as a zip, streamed as it is zipped, with RLinf's config and note for a ResNet
    (training.model_export)."""
    model = get_object_or_404(TrainedModel.objects.select_related("project"), pk=model_id)
    return _zip_download(request, model.project, lambda: model_archive_stream(model=model))


@login_required
def compare(request, pk: int):
    """Two models of a project side by side on the same snapshot (model a's unless ?snapshot= names one)."""
    project = _project(request, pk)
    models = TrainedModel.objects.filter(project=project)
    error = ""
    evaluations = []
    a: TrainedModel | None
    b: TrainedModel | None
    snapshot: DatasetSnapshot | None
    try:
        a = models.get(pk=int(request.GET.get("a", "")))
        b = models.get(pk=int(request.GET.get("b", "")))
        snapshot_id = request.GET.get("snapshot")
        snapshot = (
            get_object_or_404(DatasetSnapshot, pk=int(snapshot_id), project=project) if snapshot_id else a.snapshot
        )
        evaluations = [evaluation_data(model=m, snapshot=snapshot) for m in (a, b)]
    except (ValueError, TrainedModel.DoesNotExist):
        error = "Pick two models of this project (?a=<model id>&b=<model id>)."
        a = b = snapshot = None
    except EvaluationUnavailable as exc:
        error = str(exc)
    return render(
        request,
        "training/compare.html",
        {
            "project": project,
            "models": models,
            "a": a,
            "b": b,
            "snapshot": snapshot if not error else None,
            "error": error,
            "page_data": _evaluation_page_data("compare", evaluations, project),
        },
        status=400 if error else 200,
    )


@login_required
def vlm_evaluation(request, model_id: int):
    """A VLM trend model's evaluation: per-class precision and recall, the confusion matrix, and the eval
    windows it got most confidently wrong, each one click from labeling."""
    from .vlm.train import EVALUATION_FILE

    model = get_object_or_404(TrainedModel.objects.select_related("project"), pk=model_id, kind=ModelKind.VLM)
    access.require_page(request, training_perms.TRAINING_VIEW, model.project)
    path = local_path(model.checkpoint_path) / EVALUATION_FILE
    if not path.is_file():
        raise Http404("this model has no trend evaluation (its snapshot had no eval windows)")
    rows = trend_evaluation_rows(json.loads(path.read_text()))
    context = {"model": model, "project": model.project, "rows": rows}
    return render(request, "training/vlm_evaluation.html", context)
