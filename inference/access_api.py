"""What the caller may do with a deployment and its project, asked once by RL adapters at their start (the
DI-engine adapter checks the scopes its settings need before the run, not at its first upload)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from inference import permissions as inference_perms
from labeling import permissions as labeling_perms
from projects import access
from projects.gate.auth import DEPLOYMENT_AUTHENTICATION
from training import permissions as training_perms

from .models import Deployment

# What an RL worker does, and the permission each needs: on the deployment or on its project.
ACTIONS: dict[str, tuple[access.Perm, bool]] = {
    "rewards": (inference_perms.REWARDS, True),
    "ingest": (labeling_perms.INGEST, False),
    "propose_labels": (labeling_perms.REVIEW, False),
    "train": (training_perms.TRAIN, False),
    "switch_model": (inference_perms.SWITCH_MODEL, True),
}


class AccessOut(serializers.Serializer):
    deployment = serializers.CharField()
    project = serializers.IntegerField()
    allowed = serializers.DictField(child=serializers.BooleanField(), help_text="action -> allowed")
    refused = serializers.DictField(child=serializers.CharField(), help_text="action -> why not (refused ones)")


class DeploymentAccessView(APIView):
    authentication_classes = DEPLOYMENT_AUTHENTICATION  # a trusted network's tokenless caller hears: rewards only

    @extend_schema(
        operation_id="deployment_access",
        responses=AccessOut,
        summary="What the caller may do: ask rewards, ingest episodes, propose labels, train, switch the model",
        description="For a deployment the caller can see (else 404). Each action is answered as the endpoint "
        "doing it would answer; a refused one carries that endpoint's 403 message (e.g. the missing scope).",
    )
    def get(self, request, name: str):
        deployment = get_object_or_404(Deployment.objects.only("pk", "name", "project_id"), name=name)
        if access.check(request.user, inference_perms.DEPLOYMENT_VIEW, deployment) == 404:
            access.require(request.user, inference_perms.DEPLOYMENT_VIEW, deployment)
        allowed, refused = {}, {}
        for action, (perm, on_deployment) in ACTIONS.items():
            outcome = access.check(request.user, perm, deployment if on_deployment else deployment.project_id)
            allowed[action] = outcome == 200
            if outcome != 200:
                refused[action] = (
                    access.refusal(request.user, perm) if outcome == 403 else "the project is not visible to the caller"
                )
        return Response(
            {"deployment": deployment.name, "project": deployment.project_id, "allowed": allowed, "refused": refused}
        )
