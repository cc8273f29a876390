"""REST API for deployments and rewards (thin: validation here, work in reward_serving/services)."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from training.models import TrainedModel

from . import services
from .auth import CachedAgentTokenAuthentication
from .broker import dump_npy
from .limits import bad_requests, client_key
from .models import Deployment
from .payloads import MAX_ITEMS, PayloadError, bool_list, float_list, id_list, images_from_base64, npy_shape
from .reward_serving import RewardRequest, rewards_serve
from .serving import DeploymentNotFound, DeploymentUnavailable, deployment_config


class NpyParser(BaseParser):
    """`application/x-npy`: the raw body (validated later from its header)."""

    media_type = "application/x-npy"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read() if stream is not None else b""


class BadRequest(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "bad request"
    default_code = "bad_request"


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "inference is unavailable"
    default_code = "unavailable"


class ItemSerializer(serializers.Serializer):
    probability = serializers.FloatField(allow_null=True, help_text="Raw model probability (null: not scored).")
    success = serializers.BooleanField(allow_null=True, help_text="probability > threshold (null: not scored).")
    reward = serializers.FloatField(help_text="env_reward_weight * env_reward + reward_weight * model_output")
    scored = serializers.BooleanField(help_text="Whether the reward mode ran the model on this item.")


class RewardsResponseSerializer(serializers.Serializer):
    deployment = serializers.CharField()
    version = serializers.IntegerField()
    reward_mode = serializers.CharField()
    threshold = serializers.FloatField()
    items = ItemSerializer(many=True)


class RewardsJsonSerializer(serializers.Serializer):
    images = serializers.ListField(child=serializers.CharField(), help_text="Base64 PNG/JPEG (data URLs accepted).")
    env_rewards = serializers.ListField(child=serializers.FloatField(), required=False, allow_null=True)
    dones = serializers.ListField(child=serializers.BooleanField(), required=False, allow_null=True)
    stream = serializers.CharField(required=False, allow_blank=True, max_length=100)
    env_success = serializers.ListField(child=serializers.BooleanField(), required=False, allow_null=True)
    episode_ids = serializers.ListField(child=serializers.CharField(max_length=100), required=False, allow_null=True)


class RewardsView(APIView):
    """Rewards for a batch of images from a deployment's model."""

    parser_classes = [NpyParser, JSONParser]
    authentication_classes = [CachedAgentTokenAuthentication, SessionAuthentication]

    def initial(self, request, *args, **kwargs):
        self._client = client_key(request.META.get("HTTP_AUTHORIZATION", ""), request.META.get("REMOTE_ADDR", ""))
        if bad_requests.blocked(self._client):
            raise exceptions.Throttled(detail="too many bad requests from this client; slow down and fix them")
        super().initial(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        if 400 <= response.status_code < 500 and response.status_code != 429:
            bad_requests.record(
                getattr(self, "_client", None)
                or client_key(request.META.get("HTTP_AUTHORIZATION", ""), request.META.get("REMOTE_ADDR", ""))
            )
        return super().finalize_response(request, response, *args, **kwargs)

    @extend_schema(
        operation_id="deployment_rewards",
        summary="Rewards for a batch of images",
        description=(
            "Send `application/x-npy` (a uint8 `[B,H,W,3]` array saved with numpy.save) with optional "
            "`env_rewards` / `dones` (comma-separated) and `stream` as query parameters or `X-Env-Rewards`, "
            "`X-Dones`, `X-Stream` headers; or JSON with base64 PNG/JPEG images. Each item answers with the "
            "raw `probability`, `success` (probability > threshold) and `reward` per the deployment's reward "
            "mode and combine formula. 503 when the deployment is unhealthy or no worker answers."
        ),
        request={"application/x-npy": OpenApiTypes.BINARY, "application/json": RewardsJsonSerializer},
        parameters=[
            OpenApiParameter("env_rewards", str, description="Comma-separated env rewards, one per image."),
            OpenApiParameter("dones", str, description="Comma-separated done flags (1/0 or true/false)."),
            OpenApiParameter("stream", str, description="Stream name for history_buffer state (e.g. worker rank)."),
            OpenApiParameter(
                "env_success", str, description="Comma-separated env success flags (reward-hacking monitor)."
            ),
            OpenApiParameter("episode_ids", str, description="Comma-separated RL episode ids, one per image."),
        ],
        responses={
            200: RewardsResponseSerializer,
            400: OpenApiResponse(description="Bad images, shapes or flags (the detail says which)."),
            401: OpenApiResponse(description="Missing or unknown token."),
            404: OpenApiResponse(description="No such deployment."),
            429: OpenApiResponse(description="Too many bad requests from this client."),
            503: OpenApiResponse(description="Deployment unhealthy or no inference worker answered."),
        },
        examples=[
            OpenApiExample(
                "JSON", value={"images": ["iVBORw0KGgo..."], "env_rewards": [0.0], "dones": [False]}, request_only=True
            )
        ],
    )
    def post(self, request, name: str):
        try:
            config = deployment_config(name)
        except DeploymentNotFound as exc:
            raise exceptions.NotFound(str(exc)) from None
        if config.kind == "vlm":
            raise BadRequest(
                f"deployment {name!r} serves a VLM trend model: send windows to /api/deployments/{name}/vlm/rewards"
            )
        try:
            reward_request = self._parse(request)
        except PayloadError as exc:
            raise BadRequest(str(exc)) from None
        agent = request.user
        reward_request.client = f"a{agent.pk}" if getattr(agent, "token_hash", None) else f"u{agent.pk}"
        try:
            items = rewards_serve(config, reward_request)
        except DeploymentUnavailable as exc:
            raise ServiceUnavailable(str(exc)) from None
        return Response(
            {
                "deployment": config.name,
                "version": config.version,
                "reward_mode": config.reward.reward_mode,
                "threshold": config.reward.threshold,
                "items": [
                    {"probability": i.probability, "success": i.success, "reward": i.reward, "scored": i.scored}
                    for i in items
                ],
            }
        )

    def _parse(self, request) -> RewardRequest:
        content_type = (request.content_type or "").split(";")[0].strip()
        if content_type == NpyParser.media_type:
            payload = request.data if isinstance(request.data, bytes) else b""
            shape = npy_shape(payload, max_side=settings.MAX_IMAGE_SIDE)
            meta = {
                "env_rewards": request.query_params.get("env_rewards", request.META.get("HTTP_X_ENV_REWARDS")),
                "dones": request.query_params.get("dones", request.META.get("HTTP_X_DONES")),
                "stream": request.query_params.get("stream", request.META.get("HTTP_X_STREAM", "")),
                "env_success": request.query_params.get("env_success", request.META.get("HTTP_X_ENV_SUCCESS")),
                "episode_ids": request.query_params.get("episode_ids", request.META.get("HTTP_X_EPISODE_IDS")),
            }
        elif content_type == "application/json":
            data = request.data
            if not isinstance(data, dict) or "images" not in data:
                raise PayloadError("JSON body must be an object with an 'images' list")
            images = images_from_base64(
                data["images"], max_side=settings.MAX_IMAGE_SIDE, max_pixels=settings.MAX_IMAGE_PIXELS
            )
            payload, shape = dump_npy(images), images.shape
            meta = {k: data.get(k) for k in ("env_rewards", "dones", "env_success", "episode_ids")}
            meta["stream"] = data.get("stream") or ""
        else:
            raise exceptions.UnsupportedMediaType(
                content_type, "send application/x-npy (uint8 [B,H,W,3]) or application/json with base64 images"
            )
        n = int(shape[0])
        if n > MAX_ITEMS:
            raise PayloadError(f"at most {MAX_ITEMS} images per request")
        stream = str(meta["stream"] or "")[:100]
        return RewardRequest(
            payload=payload,
            count=n,
            env_rewards=float_list(meta["env_rewards"], n, "env_rewards"),
            dones=bool_list(meta["dones"], n, "dones"),
            stream=stream,
            env_success=bool_list(meta["env_success"], n, "env_success"),
            episode_ids=id_list(meta["episode_ids"], n, "episode_ids"),
        )


class IsStaffOrReadOnly(BasePermission):
    message = "changing deployments needs a staff account"

    def has_permission(self, request, view):
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return bool(getattr(request.user, "is_staff", False))


class DeploymentSerializer(serializers.ModelSerializer):
    trained_model = serializers.PrimaryKeyRelatedField(queryset=TrainedModel.objects.all())
    trained_model_name = serializers.CharField(source="trained_model.name", read_only=True)
    kind = serializers.CharField(source="trained_model.kind", read_only=True)

    class Meta:
        model = Deployment
        fields = [
            "name",
            "trained_model",
            "trained_model_name",
            "kind",
            "project",
            *services.SETTING_FIELDS,
            "max_batch_size",
            "max_wait_ms",
            "sample_every",
            "status",
            "error",
            "version",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["status", "error", "version", "created_at", "updated_at", "project"]


class DeploymentUpdateSerializer(DeploymentSerializer):
    class Meta(DeploymentSerializer.Meta):
        read_only_fields = [*DeploymentSerializer.Meta.read_only_fields, "name"]


class DeploymentListView(APIView):
    permission_classes = [IsStaffOrReadOnly]

    @extend_schema(operation_id="deployment_list", responses=DeploymentSerializer(many=True))
    def get(self, request):
        rows = Deployment.objects.select_related("trained_model").order_by("name")
        return Response(DeploymentSerializer(rows, many=True).data)

    @extend_schema(
        operation_id="deployment_create", request=DeploymentSerializer, responses={201: DeploymentSerializer}
    )
    def post(self, request):
        serializer = DeploymentSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        try:
            deployment = services.deployment_create(
                name=values.pop("name"), trained_model=values.pop("trained_model"), **values
            )
        except services.DeploymentError as exc:
            raise BadRequest(str(exc)) from None
        return Response(DeploymentSerializer(deployment).data, status=status.HTTP_201_CREATED)


class DeploymentDetailView(APIView):
    permission_classes = [IsStaffOrReadOnly]

    @extend_schema(operation_id="deployment_get", responses=DeploymentSerializer)
    def get(self, request, name: str):
        return Response(DeploymentSerializer(get_object_or_404(Deployment, name=name)).data)

    @extend_schema(
        operation_id="deployment_update",
        summary="Change settings or switch the served checkpoint (trained_model)",
        request=DeploymentUpdateSerializer,
        responses=DeploymentSerializer,
    )
    def patch(self, request, name: str):
        deployment = get_object_or_404(Deployment, name=name)
        serializer = DeploymentUpdateSerializer(deployment, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        try:
            deployment = services.deployment_update(
                deployment=deployment, trained_model=values.pop("trained_model", None), **values
            )
        except services.DeploymentError as exc:
            raise BadRequest(str(exc)) from None
        return Response(DeploymentSerializer(deployment).data)
