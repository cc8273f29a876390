"""`/api/models/<id>/rlinf-export`: GET the VLM model's RLinf status, POST to write its `full_weights.pt`."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from projects import access
from training import permissions as training_perms

from ..models import TrainedModel
from ..vlm.rlinf_export import RlinfExportRefused
from .services import NotAVLM, model_rlinf_export, model_rlinf_status


class RlinfExportOut(serializers.Serializer):
    checked = serializers.BooleanField(help_text="False: never exported (only the adapter's settings were checked).")
    loadable = serializers.BooleanField(
        allow_null=True, help_text="RLinf 0.3.0's history_vlm loads this LoRA as we serve it."
    )
    reasons = serializers.ListField(child=serializers.CharField(), help_text="Each setting RLinf would load otherwise.")
    present = serializers.BooleanField(help_text="full_weights.pt is there to load.")
    lora_path = serializers.CharField(help_text="reward.model.lora_path, relative to the checkpoint folder.")
    path = serializers.CharField(help_text="reward.model.lora_path on this machine.")
    full_weights = serializers.CharField(allow_null=True, help_text="The file, relative to the checkpoint folder.")
    scale = serializers.FloatField(allow_null=True, help_text="lora_B was multiplied by the adapter's alpha/rank.")


def _model(request, model_id: int, perm) -> TrainedModel:
    model = get_object_or_404(TrainedModel.objects.select_related("project"), pk=model_id)
    access.require(request.user, perm, model.project)
    return model


class RlinfExportView(APIView):
    @extend_schema(responses=RlinfExportOut)
    def get(self, request, model_id: int):
        try:
            return Response(
                RlinfExportOut(model_rlinf_status(model=_model(request, model_id, training_perms.TRAINING_VIEW))).data
            )
        except NotAVLM as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)

    @extend_schema(request=None, responses=RlinfExportOut)
    def post(self, request, model_id: int):
        model = _model(request, model_id, training_perms.TRAIN)
        try:
            return Response(RlinfExportOut(model_rlinf_export(model=model)).data)
        except NotAVLM as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        except RlinfExportRefused as exc:
            return Response({"detail": str(exc), **model_rlinf_status(model=model)}, status=status.HTTP_409_CONFLICT)
        except FileNotFoundError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
