"""REST API for deployments and rewards (thin: validation here, work in reward_serving/services)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import exceptions, serializers, status
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.views import APIView

from common.parsers import BoundedJSONParser
from inference import permissions as inference_perms
from inference.wire.decoding import RequestTooLarge, decode_slot
from inference.wire.payloads import (
    MAX_ITEMS,
    PayloadError,
    PayloadTooLarge,
    images_checked_from_base64,
    images_from_base64,
    npy_shape,
)
from projects import access
from projects.gate.auth import REWARDS_AUTHENTICATION, client_id
from projects.gate.limits import client_key, too_many
from projects.gate.throttles import ApiRateThrottle, RewardsRateThrottle, bad_request_limit, limit_check, limit_hit
from training.families import takes_windows
from training.models import ModelKind, TrainedModel
from training.resnet.wire import images_pack

from . import services
from .broker import dump_npy
from .models import Deployment, DeploymentEvent
from .reward_serving import NPY_FIELDS, RewardRequest, npy_fields, reward_request, rewards_answer
from .serving import DeploymentConfig, DeploymentNotFound, DeploymentUnavailable, deployment_config
from .shm.frames import MEDIA_TYPE as SHM_MEDIA_TYPE
from .shm.serving import request_descriptor
from .wire.errors import BadRequest, unavailable


class NpyParser(BaseParser):
    """`application/x-npy`: the raw body (validated later from its header)."""

    media_type = "application/x-npy"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read() if stream is not None else b""


class ShmParser(NpyParser):
    """`application/x-rs-shm`: a same-host descriptor (inference.shm.frames), checked in the view."""

    media_type = SHM_MEDIA_TYPE


# component_name: the OpenAPI name the body had before the <Thing>In/<Thing>Out naming rule, kept for clients.
@extend_schema_serializer(component_name="Item")
class ItemOut(serializers.Serializer):
    probability = serializers.FloatField(allow_null=True, help_text="Raw model probability (null: not scored).")
    success = serializers.BooleanField(allow_null=True, help_text="probability > threshold (null: not scored).")
    reward = serializers.FloatField(help_text="env_reward_weight * env_reward + reward_weight * model_output")
    scored = serializers.BooleanField(help_text="Whether the reward mode ran the model on this item.")
    model_output = serializers.FloatField(
        help_text="The model's part before weighting: binary/soft/thresholded output, or interval_reward; "
        "plus gt_success_bonus where env_success."
    )
    window = serializers.IntegerField(help_text="history_buffer: steps in the scored window (0: not scored).")
    assign_previous = serializers.IntegerField(
        help_text="history_reward_assign: how many earlier steps of this stream also get assign_reward."
    )
    assign_reward = serializers.FloatField(help_text="reward_weight * model_output, for those earlier steps.")
    ood = serializers.BooleanField(
        allow_null=True,
        help_text="Out of distribution by the model's OOD statistics (null: a model trained without them, or "
        "not scored); the deployment's ood_action decides the reward.",
    )
    ood_score = serializers.FloatField(
        allow_null=True, help_text="The model's OOD score over its threshold: flagged above 1 (null as ood)."
    )


@extend_schema_serializer(component_name="RewardsResponse")
class RewardsOut(serializers.Serializer):
    deployment = serializers.CharField()
    version = serializers.IntegerField()
    reward_mode = serializers.CharField()
    threshold = serializers.FloatField()
    items = ItemOut(many=True)


@extend_schema_serializer(component_name="RewardsJson")
class RewardsJsonIn(serializers.Serializer):
    images = serializers.ListField(child=serializers.CharField(), help_text="Base64 PNG/JPEG (data URLs accepted).")
    env_rewards = serializers.ListField(child=serializers.FloatField(), required=False, allow_null=True)
    dones = serializers.ListField(child=serializers.BooleanField(), required=False, allow_null=True)
    env_success = serializers.ListField(child=serializers.BooleanField(), required=False, allow_null=True)
    stream = serializers.CharField(required=False, allow_blank=True, max_length=100)
    env_success = serializers.ListField(child=serializers.BooleanField(), required=False, allow_null=True)
    episode_ids = serializers.ListField(child=serializers.CharField(max_length=100), required=False, allow_null=True)


class RewardsView(APIView):
    """Rewards for a batch of images from a deployment's model."""

    parser_classes = [NpyParser, ShmParser, BoundedJSONParser]
    authentication_classes = REWARDS_AUTHENTICATION
    throttle_classes = [ApiRateThrottle, RewardsRateThrottle]

    def initial(self, request, *args, **kwargs):
        self._client = client_key(request.META.get("HTTP_AUTHORIZATION", ""), request.META.get("REMOTE_ADDR", ""))
        verdict = async_to_sync(limit_check)(bad_request_limit(), "bad:" + self._client)
        if not verdict.allowed:
            raise exceptions.Throttled(
                wait=verdict.retry_after, detail=too_many(verdict, "too many bad requests from this client; fix them")
            )
        super().initial(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        if 400 <= response.status_code < 500 and response.status_code != 429:
            client = getattr(self, "_client", None) or client_key(
                request.META.get("HTTP_AUTHORIZATION", ""), request.META.get("REMOTE_ADDR", "")
            )
            async_to_sync(limit_hit)(bad_request_limit(), "bad:" + client)
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
        request={"application/x-npy": OpenApiTypes.BINARY, "application/json": RewardsJsonIn},
        parameters=[
            OpenApiParameter("env_rewards", str, description="Comma-separated env rewards, one per image."),
            OpenApiParameter("dones", str, description="Comma-separated done flags (1/0 or true/false)."),
            OpenApiParameter("stream", str, description="Stream name for history_buffer state (e.g. worker rank)."),
            OpenApiParameter(
                "env_success",
                str,
                description="Comma-separated env success flags (gt_success_bonus and the reward-hacking monitor).",
            ),
            OpenApiParameter("episode_ids", str, description="Comma-separated RL episode ids, one per image."),
        ],
        responses={
            200: RewardsOut,
            400: OpenApiResponse(description="Bad images, shapes or flags (the detail says which)."),
            401: OpenApiResponse(description="Missing or unknown token."),
            403: OpenApiResponse(description="The token lacks the `rewards` scope."),
            404: OpenApiResponse(description="No such deployment (or not one of the token's)."),
            413: OpenApiResponse(description="Too many images or pixels (MAX_REQUEST_PIXELS) or too large a body."),
            429: OpenApiResponse(description="Over the reward rate limit or too many bad requests (see Retry-After)."),
            503: OpenApiResponse(description="Deployment unhealthy or no inference worker answered."),
        },
        examples=[
            OpenApiExample(
                "JSON", value={"images": ["iVBORw0KGgo..."], "env_rewards": [0.0], "dones": [False]}, request_only=True
            )
        ],
    )
    def post(self, request, name: str):
        access.require_token_scope(request.user, inference_perms.REWARDS)
        try:
            config = async_to_sync(deployment_config)(name)
        except DeploymentNotFound as exc:
            raise exceptions.NotFound(str(exc)) from None
        access.require(request.user, inference_perms.REWARDS, config, not_found=f"no deployment named {name!r}")
        if takes_windows(config.kind):
            raise BadRequest(
                f"deployment {name!r} serves a VLM trend model: send windows to /api/deployments/{name}/vlm/rewards"
            )
        try:
            reward_request = self._parse(request, config)
        except PayloadTooLarge as exc:
            raise RequestTooLarge(str(exc)) from None
        except PayloadError as exc:
            raise BadRequest(str(exc)) from None
        agent = request.user
        reward_request.client = client_id(agent)
        try:
            return Response(async_to_sync(rewards_answer)(config, reward_request))
        except DeploymentUnavailable as exc:
            raise unavailable(exc) from None

    def _parse(self, request, config: DeploymentConfig) -> RewardRequest:
        content_type = (request.content_type or "").split(";")[0].strip()
        shm = None
        if content_type in (NpyParser.media_type, SHM_MEDIA_TYPE):
            payload = request.data if isinstance(request.data, bytes) else b""
            if content_type == SHM_MEDIA_TYPE:  # same-host frames: a descriptor of the client's segment
                shm = request_descriptor(payload, client_id(request.user))
                payload, shape = b"", shm.shape
            else:
                shape = npy_shape(
                    payload, max_side=settings.MAX_IMAGE_SIDE, max_request_pixels=settings.MAX_REQUEST_PIXELS
                )
            meta: dict = npy_fields(request.query_params, request.headers)
        elif content_type == "application/json":
            data = request.data
            if not isinstance(data, dict) or "images" not in data:
                raise PayloadError("JSON body must be an object with an 'images' list")
            limits = {
                "max_side": settings.MAX_IMAGE_SIDE,
                "max_pixels": settings.MAX_IMAGE_PIXELS,
                "max_request_pixels": settings.MAX_REQUEST_PIXELS,
            }
            if settings.INFERENCE_DECODE_COMPRESSED == "worker" and config.kind == ModelKind.RESNET:
                packed = images_pack(images_checked_from_base64(data["images"], **limits))  # the worker decodes
                payload, shape = dump_npy(packed), packed.shape
            else:
                with decode_slot():
                    images = images_from_base64(data["images"], **limits)
                payload, shape = dump_npy(images), images.shape
            meta = {k: data.get(k) for k in NPY_FIELDS}
        else:
            raise exceptions.UnsupportedMediaType(
                content_type, "send application/x-npy (uint8 [B,H,W,3]) or application/json with base64 images"
            )
        n = int(shape[0])
        if n > MAX_ITEMS:
            raise PayloadError(f"at most {MAX_ITEMS} images per request")
        reward = reward_request(payload, n, meta)
        reward.shm = shm
        return reward


def _deployment(request, name: str, perm=inference_perms.DEPLOYMENT_VIEW) -> Deployment:
    deployment = get_object_or_404(Deployment.objects.select_related("trained_model"), name=name)
    access.require(request.user, perm, deployment)
    return deployment


def _require_deploy(request, trained_model: TrainedModel) -> None:
    """Deploying a model needs the manager role in its project."""
    access.require(request.user, inference_perms.DEPLOY_PROJECT, trained_model.project_id)


@extend_schema_serializer(component_name="Deployment")
class DeploymentOut(serializers.ModelSerializer):
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
            "aliases",
            "chat_prompt",
            "max_batch_size",
            "max_wait_ms",
            "sample_every",
            "inference_precision",
            "status",
            "error",
            "version",
            "revision",
            "version_label",
            "paused",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "status",
            "error",
            "version",
            "revision",
            "paused",
            "created_at",
            "updated_at",
            "project",
        ]
        extra_kwargs = {"version": {"help_text": "Internal: grows with each reload (workers compare it)."}}

    version_label = serializers.CharField(read_only=True, help_text="The readable version: v1, v2, ...")


@extend_schema_serializer(component_name="DeploymentUpdate")
class DeploymentUpdateIn(DeploymentOut):
    class Meta(DeploymentOut.Meta):
        read_only_fields = [*DeploymentOut.Meta.read_only_fields, "name"]


class DeploymentListView(APIView):
    @extend_schema(operation_id="deployment_list", responses=DeploymentOut(many=True))
    def get(self, request):
        if access.is_agent(request.user):  # as the detail view: a token without the scope sees no settings
            access.require_scope(request.user, inference_perms.DEPLOYMENT_VIEW)
        rows = (
            Deployment.objects.select_related("trained_model")
            .filter(access.visible_deployment_filter(request.user))
            .order_by("name")
        )
        return Response(DeploymentOut(rows, many=True).data)

    @extend_schema(operation_id="deployment_create", request=DeploymentOut, responses={201: DeploymentOut})
    def post(self, request):
        if access.is_agent(request.user):
            raise exceptions.PermissionDenied(access.refusal(request.user, inference_perms.DEPLOY_PROJECT))
        named = str(request.data.get("trained_model", "")) if isinstance(request.data, dict) else ""
        model = TrainedModel.objects.filter(pk=int(named)).first() if named.isdigit() and len(named) < 12 else None
        if model is not None:  # refuse before judging the rest of the body
            _require_deploy(request, model)
        _refuse_taken_name(request, model)
        serializer = DeploymentOut(data=request.data)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        _require_deploy(request, values["trained_model"])
        try:
            deployment = services.deployment_create(
                name=values.pop("name"), trained_model=values.pop("trained_model"), actor=request.user, **values
            )
        except services.DeploymentError as exc:
            raise BadRequest(str(exc)) from None
        return Response(DeploymentOut(deployment).data, status=status.HTTP_201_CREATED)


def _refuse_taken_name(request, model: TrainedModel | None) -> None:
    """A name already deployed: 400 saying how to switch that deployment to the model when the caller may, else
    that the name is taken (naming no deployment the caller cannot see)."""
    name = str(request.data.get("name", "")) if isinstance(request.data, dict) else ""
    existing = Deployment.objects.select_related("trained_model").filter(name=name).first() if name else None
    if existing is None:
        return
    if model is not None and access.can(request.user, inference_perms.DEPLOY, existing):
        raise BadRequest(
            f"{name} already exists (serving {existing.trained_model.name}, {existing.version_label}): to serve "
            f'model {model.pk} there, POST /api/deployments/{name}/model {{"trained_model": {model.pk}}}; '
            "or choose another name"
        )
    raise BadRequest(services.name_taken_message(name))


MANAGER_REFUSALS = {
    403: OpenApiResponse(description="Not a manager of the deployment's project."),
    404: OpenApiResponse(description="No such deployment (or not one the caller may see)."),
}


class DeploymentDetailView(APIView):
    @extend_schema(operation_id="deployment_get", responses=DeploymentOut)
    def get(self, request, name: str):
        return Response(DeploymentOut(_deployment(request, name)).data)

    @extend_schema(
        operation_id="deployment_update",
        summary="Change settings or switch the served checkpoint (trained_model)",
        request=DeploymentUpdateIn,
        responses=DeploymentOut,
    )
    def patch(self, request, name: str):
        deployment = _deployment(request, name, inference_perms.DEPLOY)
        serializer = DeploymentUpdateIn(deployment, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        if "trained_model" in values:
            _require_deploy(request, values["trained_model"])
        try:
            deployment = services.deployment_update(
                deployment=deployment, trained_model=values.pop("trained_model", None), actor=request.user, **values
            )
        except services.DeploymentError as exc:
            raise BadRequest(str(exc)) from None
        return Response(DeploymentOut(deployment).data)

    @extend_schema(
        operation_id="deployment_delete",
        summary="Delete the deployment with its served frames (its history stays)",
        responses={204: OpenApiResponse(description="Deleted: clients asking for it get 404."), **MANAGER_REFUSALS},
    )
    def delete(self, request, name: str):
        deployment = _deployment(request, name, inference_perms.DEPLOY)
        services.deployment_delete(deployment=deployment, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


PAUSE_RESPONSES = {200: DeploymentOut, **MANAGER_REFUSALS}


class DeploymentPauseView(APIView):
    """Pause a deployment (clients get 503 saying it is paused) or resume it; managers of its project."""

    paused = True

    @extend_schema(
        operation_id="deployment_pause",
        summary="Pause: reward requests answer 503 saying the deployment is paused",
        request=None,
        responses=PAUSE_RESPONSES,
    )
    def post(self, request, name: str):
        deployment = _deployment(request, name, inference_perms.DEPLOY)
        deployment = services.deployment_pause(deployment=deployment, paused=self.paused, actor=request.user)
        return Response(DeploymentOut(deployment).data)


class DeploymentResumeView(DeploymentPauseView):
    paused = False

    @extend_schema(
        operation_id="deployment_resume", summary="Resume a paused deployment", request=None, responses=PAUSE_RESPONSES
    )
    def post(self, request, name: str):
        return super().post(request, name)


@extend_schema_serializer(component_name="DeploymentEvent")
class DeploymentEventOut(serializers.ModelSerializer):
    class Meta:
        model = DeploymentEvent
        fields = ["action", "actor", "revision", "detail", "created_at"]


class DeploymentHistoryView(APIView):
    @extend_schema(
        operation_id="deployment_history",
        summary="Who created, switched, changed, paused or reloaded the deployment, newest first",
        responses=DeploymentEventOut(many=True),
    )
    def get(self, request, name: str):
        deployment = _deployment(request, name)
        return Response(DeploymentEventOut(deployment.events.all()[:500], many=True).data)


class DeploymentModelIn(serializers.Serializer):
    trained_model = serializers.PrimaryKeyRelatedField(queryset=TrainedModel.objects.all())


class DeploymentModelView(APIView):
    """Switch the served checkpoint: the project's managers, or an agent token with the `training` scope on the
    deployment (an RL worker that retrains its own reward, e.g. the DI-engine adapter's `train`), for a model
    of the deployment's project and kind (site admins may take any model)."""

    @extend_schema(
        operation_id="deployment_switch_model",
        summary="Serve another trained model of the same project (bumps the version; nothing in flight drops)",
        request=DeploymentModelIn,
        responses={
            200: DeploymentOut,
            400: OpenApiResponse(description="Model of another project or kind."),
            403: OpenApiResponse(description="Not a manager of the project, or the token lacks the `training` scope."),
            404: OpenApiResponse(description="No such deployment (or not one the caller may see)."),
        },
    )
    def post(self, request, name: str):
        deployment = Deployment.objects.select_related("trained_model").filter(name=name).first()
        not_found = f"no deployment named {name!r}"
        if deployment is None:
            raise exceptions.NotFound(not_found)
        access.require(request.user, inference_perms.SWITCH_MODEL, deployment, not_found=not_found)
        data = DeploymentModelIn(data=request.data)
        data.is_valid(raise_exception=True)
        model = data.validated_data["trained_model"]
        if not access.is_site_admin(request.user):
            project_id = deployment.project_id or deployment.trained_model.project_id
            if model.project_id != project_id:
                raise BadRequest("an agent may only deploy models trained in the deployment's project")
            if model.kind != deployment.trained_model.kind:
                raise BadRequest(f"the deployment serves a {deployment.trained_model.kind} model, not {model.kind}")
        try:
            deployment = services.deployment_update(deployment=deployment, trained_model=model, actor=request.user)
        except services.DeploymentError as exc:
            raise BadRequest(str(exc)) from None
        return Response(DeploymentOut(deployment).data)
