"""REST API of the training app: snapshots, jobs (create, cancel, retry, delete, curves), evaluations."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from common.jobs.api import JOB_PROGRESS_FIELDS, JobProgressOut
from common.parsers import BoundedJSONParser
from projects import access
from projects.models import Project
from training import permissions as training_perms
from training.evaluation.model_evaluation import EvaluationPending, EvaluationUnavailable, evaluation_data

from . import selectors, services
from .models import DatasetSnapshot, ModelKind, TrainedModel, TrainingJob
from .services import JobError
from .snapshots.services import SnapshotError, snapshot_start


class SnapshotOut(JobProgressOut, serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", default="", read_only=True)
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = DatasetSnapshot
        fields = [
            "id",
            "number",
            *JOB_PROGRESS_FIELDS,
            "frames_done",
            "frames_total",
            "options",
            "stats",
            "shared_episodes",
            "split_warning",
            "created_by",
            "created_at",
            "url",
            "page_url",
            "download_url",
        ]

    shared_episodes = serializers.IntegerField(
        read_only=True, help_text="Episodes with frames in both train and val (a frame split); 0 when none."
    )
    split_warning = serializers.CharField(
        read_only=True, help_text="Says that validation shares episodes with training ('' when it does not)."
    )
    url = serializers.SerializerMethodField(help_text="Poll this (GET) until status is ready or failed.")
    page_url = serializers.SerializerMethodField(help_text="The snapshot's page, with a live progress bar.")

    def get_url(self, obj) -> str:
        return f"/api/snapshots/{obj.pk}"

    def get_page_url(self, obj) -> str:
        return f"/snapshots/{obj.pk}/"

    def get_download_url(self, obj) -> str:
        return f"/snapshots/{obj.pk}/download"


class SnapshotIn(serializers.Serializer):
    options = serializers.DictField(
        required=False, default=dict, help_text="See SnapshotOptions; unknown keys are refused."
    )


class JobOut(JobProgressOut, serializers.ModelSerializer):
    snapshot = serializers.IntegerField(source="snapshot.number", read_only=True)
    models = serializers.SerializerMethodField()

    class Meta:
        model = TrainingJob
        fields = [
            "id",
            "project",
            "snapshot",
            "kind",
            "name",
            "config",
            *JOB_PROGRESS_FIELDS,
            "cancel_requested",
            "eta_seconds",
            "summary",
            "created_at",
            "models",
        ]

    def get_models(self, obj) -> list[int]:
        return [m.pk for m in obj.models.all()]


class JobIn(serializers.Serializer):
    snapshot = serializers.IntegerField(help_text="Snapshot number within the project.")
    kind = serializers.ChoiceField(choices=ModelKind.choices, default=ModelKind.RESNET)
    name = serializers.CharField(required=False, default="", allow_blank=True, max_length=200)
    config = serializers.DictField(required=False, default=dict)


# component_name: the OpenAPI name the body had before the <Thing>In/<Thing>Out naming rule, kept for clients.
@extend_schema_serializer(component_name="MetricPoint")
class MetricPointOut(serializers.Serializer):
    kind = serializers.CharField()
    step = serializers.IntegerField()
    epoch = serializers.IntegerField(allow_null=True)


def _project(request, pk: int, perm=training_perms.TRAINING_VIEW) -> Project:
    project = get_object_or_404(Project, pk=pk)
    access.require(request.user, perm, project)
    return project


def _job(request, job_id: int, perm=training_perms.TRAINING_VIEW) -> TrainingJob:
    job = get_object_or_404(TrainingJob.objects.select_related("project", "snapshot"), pk=job_id)
    access.require(request.user, perm, job.project)
    return job


class SnapshotListView(APIView):
    # `options` nests (sources, splits): JSON only; a form body's flat keys were ignored and a default build queued
    parser_classes = [BoundedJSONParser]

    @extend_schema(responses=SnapshotOut(many=True))
    def get(self, request, pk: int):
        project = _project(request, pk)
        return Response(SnapshotOut(selectors.snapshots_for_project(project), many=True).data)

    @extend_schema(
        request=SnapshotIn,
        responses={202: SnapshotOut},
        description="Checks the options (400 at once when wrong) and queues the build: the answer is the new "
        "snapshot with status `building`; poll its `url` until `ready` (or `failed`, with `error`).",
    )
    def post(self, request, pk: int):
        project = _project(request, pk, training_perms.TRAIN)
        data = SnapshotIn(data=request.data)
        data.is_valid(raise_exception=True)
        user = (
            request.user if getattr(request.user, "_meta", None) and request.user._meta.model_name == "user" else None
        )
        try:
            snapshot = snapshot_start(project=project, options=data.validated_data["options"], created_by=user)
        except (SnapshotError, ValueError) as exc:
            raise ValidationError({"detail": str(exc)}) from None
        return Response(SnapshotOut(snapshot).data, status=status.HTTP_202_ACCEPTED)


class SnapshotDetailView(APIView):
    @extend_schema(responses=SnapshotOut)
    def get(self, request, snapshot_id: int):
        snapshot = get_object_or_404(DatasetSnapshot.objects.select_related("project", "created_by"), pk=snapshot_id)
        access.require(request.user, training_perms.TRAINING_VIEW, snapshot.project)
        return Response(SnapshotOut(snapshot).data)


class JobListView(APIView):
    @extend_schema(responses=JobOut(many=True))
    def get(self, request, pk: int):
        project = _project(request, pk)
        return Response(JobOut(selectors.jobs_for_project(project).prefetch_related("models")[:200], many=True).data)

    @extend_schema(request=JobIn, responses={201: JobOut})
    def post(self, request, pk: int):
        project = _project(request, pk, training_perms.TRAIN)
        data = JobIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        snapshot = DatasetSnapshot.objects.filter(project=project, number=values["snapshot"]).first()
        if snapshot is None:
            raise ValidationError({"snapshot": f"project has no snapshot #{values['snapshot']}"})
        user = (
            request.user if getattr(request.user, "_meta", None) and request.user._meta.model_name == "user" else None
        )
        if snapshot.status != DatasetSnapshot.Status.READY:
            wait = f" still building: wait until GET /api/snapshots/{snapshot.pk} says ready"
            reason = wait if snapshot.status == DatasetSnapshot.Status.BUILDING else " failed; build a new one"
            raise ValidationError({"snapshot": f"snapshot #{snapshot.number} is{reason}"})
        try:
            job = services.job_create(
                project=project,
                snapshot=snapshot,
                kind=values["kind"],
                config=values["config"],
                name=values["name"],
                created_by=user,
            )
        except ValueError as exc:
            raise ValidationError({"config": str(exc)}) from None
        return Response(JobOut(job).data, status=status.HTTP_201_CREATED)


class JobDetailView(APIView):
    @extend_schema(responses=JobOut)
    def get(self, request, job_id: int):
        return Response(JobOut(_job(request, job_id)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, job_id: int):
        job = _job(request, job_id, training_perms.TRAIN)
        try:
            services.job_delete(job=job)
        except JobError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)


class JobCancelView(APIView):
    @extend_schema(request=None, responses=JobOut)
    def post(self, request, job_id: int):
        try:
            job = services.job_cancel(job=_job(request, job_id, training_perms.TRAIN))
        except JobError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(JobOut(job).data)


class JobRetryView(APIView):
    @extend_schema(request=None, responses=JobOut)
    def post(self, request, job_id: int):
        try:
            job = services.job_retry(job=_job(request, job_id, training_perms.TRAIN))
        except JobError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(JobOut(job).data)


class JobMetricsView(APIView):
    @extend_schema(
        responses=MetricPointOut(many=True),
        description="Every curve point: steps (train_loss, train_acc, lr) and epochs (val_loss, val_acc).",
    )
    def get(self, request, job_id: int):
        _job(request, job_id)
        return Response(selectors.job_history(job_id))


def _evaluation(*, model, snapshot, threshold: float):
    """The figures on disk when the job wrote them (read without importing torch, so the web process stays
    small); computed here only for a model or snapshot that has none yet."""
    try:
        return evaluation_data(model=model, snapshot=snapshot, threshold=threshold, compute=False)
    except EvaluationPending:
        return evaluation_data(model=model, snapshot=snapshot, threshold=threshold)


class ModelEvaluationView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("threshold", float, description="Success is probability > threshold (default 0.5)."),
            OpenApiParameter("snapshot", int, description="Snapshot id to evaluate on (default: the model's own)."),
        ],
        responses=dict,
    )
    def get(self, request, model_id: int):
        model = get_object_or_404(TrainedModel.objects.select_related("project"), pk=model_id)
        access.require(request.user, training_perms.TRAINING_VIEW, model.project)
        try:
            threshold = float(request.query_params.get("threshold", 0.5))
        except ValueError:
            raise ValidationError({"threshold": "must be a number"}) from None
        if not 0.0 <= threshold <= 1.0:
            raise ValidationError({"threshold": "must be between 0 and 1"})
        snapshot = None
        if "snapshot" in request.query_params:
            snapshot = get_object_or_404(DatasetSnapshot, pk=request.query_params["snapshot"], project=model.project)
        try:
            data = _evaluation(model=model, snapshot=snapshot, threshold=threshold)
        except EvaluationUnavailable as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(data)
