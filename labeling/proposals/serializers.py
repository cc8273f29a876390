"""Proposal API bodies: the scope a decision applies to, what it answers, the generate request and its
counts, and a proposal-generation job."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from common.jobs.api import JOB_PROGRESS_FIELDS, JobProgressOut

from ..ingest.serializers import MAX_STEP_INDEX
from ..models import ProposalJob
from .services import KINDS


# component_name: the OpenAPI name the body had before the <Thing>In/<Thing>Out naming rule, kept for clients.
@extend_schema_serializer(component_name="ProposalJob")
class ProposalJobOut(JobProgressOut, serializers.ModelSerializer):
    url = serializers.SerializerMethodField(help_text="This job over the API (poll it until `finished`).")
    page = serializers.SerializerMethodField(help_text="This job's page, with its progress bar.")

    class Meta:
        model = ProposalJob
        fields = ["id", "project", *JOB_PROGRESS_FIELDS, "done", "total", "summary", "created_at", "url", "page"]
        read_only_fields = fields

    def get_url(self, job: ProposalJob) -> str:
        return reverse("api-proposal-job", args=[job.pk])

    def get_page(self, job: ProposalJob) -> str:
        return reverse("project-proposal-job", args=[job.project_id, job.pk])


@extend_schema_serializer(component_name="ProposalScope")
class ProposalScopeIn(serializers.Serializer):
    kind = serializers.ChoiceField(choices=KINDS, default="all")
    episode = serializers.UUIDField(required=False, help_text="Limit to one episode of the project.")
    start = serializers.IntegerField(
        min_value=0, max_value=MAX_STEP_INDEX, required=False, help_text="First step (frames) / window start."
    )
    end = serializers.IntegerField(
        min_value=0, max_value=MAX_STEP_INDEX, required=False, help_text="Last step (frames) / window end."
    )

    def validate(self, attrs):
        if ("start" in attrs or "end" in attrs) and "episode" not in attrs:
            raise serializers.ValidationError("a step range needs an episode")
        if "start" in attrs and "end" in attrs and attrs["end"] < attrs["start"]:
            raise serializers.ValidationError("end must not be before start")
        return attrs


@extend_schema_serializer(component_name="Decision")
class DecisionOut(serializers.Serializer):
    frames = serializers.IntegerField(help_text="Frame proposals decided.")
    windows = serializers.IntegerField(help_text="Window proposals decided.")
    previous_frames = serializers.DictField(
        child=serializers.ListField(child=serializers.DictField()),
        help_text="Per episode UUID: human frame labels before an accept, [{index, value}] (for undo).",
    )
    previous_windows = serializers.DictField(
        child=serializers.ListField(child=serializers.DictField()),
        help_text="Per episode UUID: human window labels before an accept, [{start, end, value}].",
    )


class GenerateIn(serializers.Serializer):
    episode = serializers.UUIDField(required=False, help_text="Only this episode (default: every episode).")


class GenerateOut(serializers.Serializer):
    episodes = serializers.IntegerField()
    frames_created = serializers.IntegerField()
    frames_updated = serializers.IntegerField()
    windows_created = serializers.IntegerField()
    windows_updated = serializers.IntegerField()
    windows_removed = serializers.IntegerField()
