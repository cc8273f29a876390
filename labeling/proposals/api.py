"""Proposal-generation jobs over the API: their progress and counts, and cancelling one (the generate
endpoint that starts them is in label_api.py)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.common.jobs.api import JOB_PROGRESS_FIELDS, JobProgressOut

from .. import access
from ..models import ProposalJob
from .jobs import proposal_job_cancel


class ProposalJobSerializer(JobProgressOut, serializers.ModelSerializer):
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


def _job(request, job_id: int, perm) -> ProposalJob:
    job = get_object_or_404(ProposalJob.objects.select_related("project"), pk=job_id)
    access.require(request.user, perm, job.project)
    return job


class ProposalJobView(APIView):
    @extend_schema(responses=ProposalJobSerializer, summary="A proposal-generation job: status, progress, counts")
    def get(self, request, job_id: int):
        return Response(ProposalJobSerializer(_job(request, job_id, access.VIEW)).data)


class ProposalJobCancelView(APIView):
    @extend_schema(
        request=None,
        responses={200: ProposalJobSerializer, 409: ProposalJobSerializer},
        summary="Cancel a queued or running proposal-generation job (it stops after its current episode)",
    )
    def post(self, request, job_id: int):
        job = _job(request, job_id, access.REVIEW)
        if not proposal_job_cancel(job=job):
            body = {"detail": f"the job has already ended ({job.status})", **ProposalJobSerializer(job).data}
            return Response(body, status=status.HTTP_409_CONFLICT)
        return Response(ProposalJobSerializer(job).data)
