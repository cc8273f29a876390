"""REST API of VLM trend deployments (the OpenAI-compatible chat endpoint is `inference.vlm.chat_api`).

- `POST /api/deployments/<name>/vlm/rewards`: trend rewards for whole windows (`windows`) or for steps
  of parallel streams buffered server-side (`steps`, reward mode `history_vlm` / `buffered_vlm`).
- `POST /v1/chat/completions`: the OpenAI format RLinf's API reward worker speaks (`model` = deployment
  name, a user message of base64 `image_url` parts and text, `max_tokens`, `temperature`); the answer is
  the model's greedy completion, plus a `reward_studio` object with label probabilities and the reward.
Both authenticate with the agent token (`Authorization: Bearer <token>`, which is what an OpenAI
client sends as its api_key), or need none from a trusted network (`TRUSTED_CIDRS`: RLinf's API reward
worker sends no token). `model` is the deployment's name or an alias, case-insensitively. The web process never loads a model (see `inference.vlm.serving`).
"""

from __future__ import annotations

import numpy as np
from asgiref.sync import async_to_sync
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from common.parsers import BoundedJSONParser
from inference.api import NpyParser
from inference.serving import DeploymentUnavailable
from inference.wire.errors import BadRequest, unavailable
from inference.wire.payloads import PayloadError, bool_list, float_list
from projects.gate.auth import DEPLOYMENT_AUTHENTICATION, client_id
from projects.gate.throttles import ApiRateThrottle, RewardsRateThrottle
from training.vlm.wire import MAX_NEW_TOKENS

from .requests import (
    MAX_FRAMES_PER_VIEW,
    MAX_STEPS,
    MAX_WINDOWS,
    deployment_allowed,
    frames_decode,
    npy_body,
    vlm_deployment_for,
)
from .serving import REWARD_MODES, StreamStep, TooManyStreams, stream_rewards, windows_rewards

# ---- trend rewards -----------------------------------------------------------------------------------


class FrameField(serializers.Field):
    """A frame: base64 PNG/JPEG in JSON (decoded later, so errors can name the frame), or an array row
    of an `.npy` body."""

    def to_internal_value(self, data):
        if isinstance(data, np.ndarray | str):
            return data
        raise serializers.ValidationError("expected a base64-encoded PNG or JPEG string")

    def to_representation(self, value):
        return value


@extend_schema_field(OpenApiTypes.STR)
class Base64FrameField(FrameField):
    pass


# component_name: the OpenAPI name the body had before the <Thing>In/<Thing>Out naming rule, kept for clients.
@extend_schema_serializer(component_name="VLMWindow")
class VLMWindowIn(serializers.Serializer):
    main = serializers.ListField(child=Base64FrameField(), min_length=1, max_length=MAX_FRAMES_PER_VIEW)
    extra = serializers.ListField(child=Base64FrameField(), min_length=1, max_length=MAX_FRAMES_PER_VIEW)
    env_reward = serializers.FloatField(default=0.0)
    env_success = serializers.BooleanField(default=False)


@extend_schema_serializer(component_name="VLMStreamStep")
class VLMStreamStepIn(serializers.Serializer):
    stream = serializers.CharField(max_length=100, help_text="One per parallel env (e.g. the env index).")
    main = Base64FrameField(help_text="This step's main-view frame, base64 PNG/JPEG.")
    extra = Base64FrameField(help_text="This step's extra-view frame, base64 PNG/JPEG.")
    env_reward = serializers.FloatField(default=0.0)
    env_success = serializers.BooleanField(default=False)
    done = serializers.BooleanField(default=False, help_text="Clears the stream's buffer after this step.")
    reset = serializers.BooleanField(default=False, help_text="Clears the stream's buffer before this step.")


@extend_schema_serializer(component_name="VLMRewardsRequest")
class VLMRewardsIn(serializers.Serializer):
    reward_mode = serializers.ChoiceField(choices=[*REWARD_MODES, "window"], required=False)
    windows = serializers.ListField(child=VLMWindowIn(), required=False, max_length=MAX_WINDOWS)
    steps = serializers.ListField(child=VLMStreamStepIn(), required=False, max_length=MAX_STEPS)
    generate = serializers.BooleanField(
        default=False, help_text="Label from greedy generation read by the parser, instead of label-token logits."
    )
    max_new_tokens = serializers.IntegerField(default=16, min_value=1, max_value=MAX_NEW_TOKENS)
    label_rewards = serializers.DictField(child=serializers.FloatField(), required=False)
    gt_success_bonus = serializers.FloatField(required=False)

    def validate(self, data):
        has_windows, has_steps = bool(data.get("windows")), bool(data.get("steps"))
        if has_windows == has_steps:
            raise serializers.ValidationError("send either a non-empty 'windows' list or a non-empty 'steps' list")
        mode = data.get("reward_mode") or ("window" if has_windows else "history_vlm")
        if (mode == "window") != has_windows:
            raise serializers.ValidationError(
                f"reward_mode {mode!r} takes {'windows' if mode == 'window' else 'steps'}"
            )
        data["reward_mode"] = mode
        return data


@extend_schema_serializer(component_name="VLMItem")
class VLMItemOut(serializers.Serializer):
    stream = serializers.CharField(required=False)
    step = serializers.IntegerField(required=False, help_text="Index of the step within its stream's buffer.")
    scored = serializers.BooleanField()
    label = serializers.CharField(allow_null=True)  # type: ignore[assignment]  # the API field shadows Field.label
    probabilities = serializers.DictField(child=serializers.FloatField(), allow_null=True)
    text = serializers.CharField(allow_null=True)
    model_output = serializers.FloatField(help_text="Label reward (+ success bonus), or interval_reward.")
    reward = serializers.FloatField(help_text="env_reward_weight * env_reward + reward_weight * model_output")
    window = serializers.IntegerField(required=False, help_text="Steps in the scored window (0: not scored).")
    assign_previous = serializers.IntegerField(
        required=False, help_text="history_reward_assign: earlier steps of the stream that also get assign_reward."
    )
    assign_reward = serializers.FloatField(required=False, help_text="reward_weight * model_output for those steps.")


@extend_schema_serializer(component_name="VLMRewardsResponse")
class VLMRewardsOut(serializers.Serializer):
    deployment = serializers.CharField()
    version = serializers.IntegerField()
    reward_mode = serializers.CharField()
    prompt = serializers.CharField()
    label_rewards = serializers.DictField(child=serializers.FloatField())
    gt_success_bonus = serializers.FloatField()
    items = VLMItemOut(many=True)


def npy_request(request) -> dict:
    """The JSON-shaped request data from an `.npy` body and its query parameters."""
    array = npy_body(request.data if isinstance(request.data, bytes) else b"")
    query = request.query_params
    n = array.shape[0]
    try:
        env_rewards = float_list(query.get("env_rewards"), n, "env_rewards") or [0.0] * n
        env_success = bool_list(query.get("env_success"), n, "env_success") or [False] * n
        dones = bool_list(query.get("dones"), n, "dones") or [False] * n
        resets = bool_list(query.get("resets"), n, "resets") or [False] * n
    except PayloadError as exc:
        raise BadRequest(str(exc)) from None
    streams = [s.strip() for s in query.get("streams", "").split(",")] if query.get("streams") else None
    if streams is not None and len(streams) != n:
        raise BadRequest(f"streams names {len(streams)} streams for {n} items")
    data = {k: query[k] for k in ("reward_mode", "generate", "max_new_tokens", "gt_success_bonus") if k in query}
    if array.ndim == 6:
        data["windows"] = [
            {"main": list(a[0]), "extra": list(a[1]), "env_reward": r, "env_success": s}
            for a, r, s in zip(array, env_rewards, env_success, strict=True)
        ]
    else:
        data["steps"] = [
            {
                "stream": streams[i] if streams else str(i),
                "main": a[0],
                "extra": a[1],
                "env_reward": env_rewards[i],
                "env_success": env_success[i],
                "done": dones[i],
                "reset": resets[i],
            }
            for i, a in enumerate(array)
        ]
    return data


def windows_decoded(windows: list[dict]) -> list[dict]:
    """The request's windows with their frames decoded (an error names the frame, `windows[i].main[j]`)."""
    frames = [
        (f, f"windows[{i}].{view}[{j}]")
        for i, w in enumerate(windows)
        for view in ("main", "extra")
        for j, f in enumerate(w[view])
    ]
    decoded = iter(frames_decode(frames))
    return [
        {
            "main": [next(decoded) for _ in w["main"]],
            "extra": [next(decoded) for _ in w["extra"]],
            "env_reward": w["env_reward"],
            "env_success": w["env_success"],
        }
        for w in windows
    ]


def steps_decoded(steps: list[dict]) -> list[StreamStep]:
    """The request's stream steps with their frames decoded (an error names the frame, `steps[i].main`)."""
    decoded = iter(
        frames_decode([(s[view], f"steps[{i}].{view}") for i, s in enumerate(steps) for view in ("main", "extra")])
    )
    return [
        StreamStep(
            stream=s["stream"],
            main=next(decoded),
            extra=next(decoded),
            env_reward=s["env_reward"],
            env_success=s["env_success"],
            done=s["done"],
            reset=s["reset"],
        )
        for s in steps
    ]


def rewards_scored(request, deployment, data: dict) -> list[dict]:
    """The answer's items: whole windows scored as sent, or steps buffered per stream and scored at intervals."""
    generation = {"generate": data["generate"], "max_new_tokens": data["max_new_tokens"]}
    try:
        if data["reward_mode"] == "window":
            return async_to_sync(windows_rewards)(deployment, windows_decoded(data["windows"]), **generation)
        steps = steps_decoded(data["steps"])
        return async_to_sync(stream_rewards)(deployment, steps, client=client_id(request.user), **generation)
    except DeploymentUnavailable as exc:
        raise unavailable(exc) from None
    except TooManyStreams as exc:
        raise exceptions.Throttled(detail=str(exc)) from None


def rewards_request(request) -> dict:
    """The validated request, from a JSON body or an `.npy` body with its query parameters."""
    content_type = (request.content_type or "").split(";")[0].strip()
    raw = npy_request(request) if content_type == NpyParser.media_type else request.data
    body = VLMRewardsIn(data=raw)
    body.is_valid(raise_exception=True)
    return body.validated_data


# The OpenAPI description of `VLMRewardsView.post`, kept beside the serializers it names.
REWARDS_SCHEMA = extend_schema(
    operation_id="deployment_vlm_rewards",
    summary="Trend rewards for windows or buffered stream steps (VLM deployments)",
    description=(
        "`windows`: each a list of main-view and extra-view frames (base64 PNG/JPEG), scored as sent. "
        "`steps` (reward_mode `history_vlm`, alias `buffered_vlm`): one frame per view per stream; the "
        "server keeps each stream's last steps and scores a window by RLinf's HistoryManager counting "
        "(`count % input_interval == 0` once `min_history_size` steps are held; `input_on_done`); other "
        "steps get `interval_reward`. The label comes from the three label tokens' probabilities in one "
        "forward pass, or with `generate` from greedy text read by the trend parser. The reward maps "
        "positive/negative/unclear/invalid (default 1.0/-0.2/0.0/0.0) plus `gt_success_bonus` when "
        "env_success, then the deployment's combine formula. Compact form: `application/x-npy` with a "
        "uint8 `[B,2,H,W,3]` array (one step per stream, both views) or `[B,2,T,H,W,3]` (windows) and the "
        "per-item values as comma-separated query parameters."
    ),
    request={"application/json": VLMRewardsIn, "application/x-npy": OpenApiTypes.BINARY},
    parameters=[
        OpenApiParameter("streams", str, description=".npy only: stream names, comma-separated (default 0..B-1)."),
        OpenApiParameter("env_rewards", str, description=".npy only: env rewards, comma-separated."),
        OpenApiParameter("env_success", str, description=".npy only: env success flags (1/0), comma-separated."),
        OpenApiParameter("dones", str, description=".npy only: done flags (1/0), comma-separated."),
        OpenApiParameter("resets", str, description=".npy only: reset flags (1/0), comma-separated."),
    ],
    responses={
        200: VLMRewardsOut,
        400: OpenApiResponse(description="Bad images or fields, or not a VLM deployment (the detail says which)."),
        401: OpenApiResponse(description="Missing or unknown token."),
        403: OpenApiResponse(description="The token lacks the `rewards` scope."),
        404: OpenApiResponse(description="No such deployment."),
        503: OpenApiResponse(description="Deployment unhealthy or no inference worker answered."),
    },
)


class VLMRewardsView(APIView):
    """Trend rewards from a deployed Qwen3-VL."""

    parser_classes = [NpyParser, BoundedJSONParser]
    throttle_classes = [ApiRateThrottle, RewardsRateThrottle]
    authentication_classes = DEPLOYMENT_AUTHENTICATION

    @REWARDS_SCHEMA
    def post(self, request, name: str):
        deployment_allowed(request, name)
        data = rewards_request(request)
        deployment = vlm_deployment_for(
            request, name, label_rewards=data.get("label_rewards"), gt_success_bonus=data.get("gt_success_bonus")
        )
        items = rewards_scored(request, deployment, data)
        return Response(
            {
                "deployment": deployment.config.name,
                "version": deployment.config.version,
                "reward_mode": data["reward_mode"],
                "prompt": deployment.prompt,
                "label_rewards": deployment.reward.label_rewards,
                "gt_success_bonus": deployment.reward.gt_success_bonus,
                "items": items,
            }
        )
