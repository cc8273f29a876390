"""Proposal API: (re)computing proposals (for one episode now, or the whole project as a background job),
accepting, rejecting or reopening them in a scope, and a generation job's progress and cancelling."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from common.parsers import BoundedJSONParser
from labeling import permissions as labeling_perms
from projects import access
from projects.models import Project

from ..labels.services import Actor
from ..models import Episode, ProposalJob, ProposalStatus
from . import services as proposals
from .jobs import proposal_job_cancel, proposal_job_start
from .serializers import (
    DecisionOut,
    GenerateIn,
    GenerateOut,
    ProposalJobOut,
    ProposalScopeIn,
)


def _project(request, pk, perm) -> Project:
    project = get_object_or_404(Project, pk=pk)
    access.require(request.user, perm, project)
    return project


def _job(request, job_id: int, perm) -> ProposalJob:
    job = get_object_or_404(ProposalJob.objects.select_related("project"), pk=job_id)
    access.require(request.user, perm, job.project)
    return job


class ProposalsGenerateView(APIView):
    parser_classes = [BoundedJSONParser]

    @extend_schema(
        request=GenerateIn,
        responses={
            # the counts (with `episode`), or the job already running (without)
            200: PolymorphicProxySerializer(
                component_name="GenerateAnswer",
                serializers=[GenerateOut, ProposalJobOut],
                resource_type_field_name=None,
            ),
            202: ProposalJobOut,
        },
        summary="(Re)compute frame proposals (env success) and window proposals (trend rule)",
        description=(
            "With `episode`: that episode's proposals, computed now (200, the counts). Without: every episode "
            "of the project, in the background (202, a job to poll at its `url` or watch at its `page`); "
            "while one runs, asking again answers 200 with that job."
        ),
    )
    def post(self, request, pk):
        project = _project(request, pk, labeling_perms.REVIEW)
        data = GenerateIn(data=request.data)
        data.is_valid(raise_exception=True)
        if "episode" not in data.validated_data:
            job, created = proposal_job_start(project=project, user=request.user)
            answer = status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK
            return Response(ProposalJobOut(job).data, status=answer)
        episodes = Episode.objects.filter(uuid=data.validated_data["episode"], project=project)
        if not episodes.exists():
            raise ValidationError({"episode": ["no such episode in this project"]})
        result = proposals.proposals_generate(project=project, episodes=episodes)
        return Response(GenerateOut(result).data)


class ProposalsDecisionView(APIView):
    """accept / reject / reopen proposals in a scope: one step, a range, an episode or the whole project."""

    parser_classes = [BoundedJSONParser]
    action = "accept"

    @extend_schema(request=ProposalScopeIn, responses=DecisionOut)
    def post(self, request, pk):
        project = _project(request, pk, labeling_perms.REVIEW)
        data = ProposalScopeIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        episode = None
        if "episode" in values:
            episode = Episode.objects.filter(uuid=values["episode"], project=project).first()
            if episode is None:
                raise ValidationError({"episode": ["no such episode in this project"]})
        scope = {
            "project": project,
            "kind": values["kind"],
            "actor": Actor.of(request.user),
            "episode": episode,
            "start": values.get("start"),
            "end": values.get("end"),
        }
        if self.action == "accept":
            result = proposals.proposals_accept(**scope)
        else:
            new_status = ProposalStatus.REJECTED if self.action == "reject" else ProposalStatus.OPEN
            result = proposals.proposals_set_status(status=new_status, **scope)
        return Response(DecisionOut(result).data, status=status.HTTP_200_OK)


class ProposalsAcceptView(ProposalsDecisionView):
    action = "accept"

    @extend_schema(
        request=ProposalScopeIn,
        responses=DecisionOut,
        summary="Accept open proposals: their values become the human labels",
    )
    def post(self, request, pk):
        return super().post(request, pk)


class ProposalsRejectView(ProposalsDecisionView):
    action = "reject"

    @extend_schema(request=ProposalScopeIn, responses=DecisionOut, summary="Reject open proposals")
    def post(self, request, pk):
        return super().post(request, pk)


class ProposalsReopenView(ProposalsDecisionView):
    action = "reopen"

    @extend_schema(
        request=ProposalScopeIn,
        responses=DecisionOut,
        summary="Reopen accepted or rejected proposals (human labels stay as they are)",
    )
    def post(self, request, pk):
        return super().post(request, pk)


class ProposalJobView(APIView):
    @extend_schema(responses=ProposalJobOut, summary="A proposal-generation job: status, progress, counts")
    def get(self, request, job_id: int):
        return Response(ProposalJobOut(_job(request, job_id, labeling_perms.VIEW)).data)


class ProposalJobCancelView(APIView):
    @extend_schema(
        request=None,
        responses={200: ProposalJobOut, 409: ProposalJobOut},
        summary="Cancel a queued or running proposal-generation job (it stops after its current episode)",
    )
    def post(self, request, job_id: int):
        job = _job(request, job_id, labeling_perms.REVIEW)
        if not proposal_job_cancel(job=job):
            body = {"detail": f"the job has already ended ({job.status})", **ProposalJobOut(job).data}
            return Response(body, status=status.HTTP_409_CONFLICT)
        return Response(ProposalJobOut(job).data)
