"""REST API of VLM trend deployments, and an OpenAI-compatible chat-completions endpoint.

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

import base64
import binascii
import io
import time
import uuid
from collections.abc import Sequence

import numpy as np
from asgiref.sync import async_to_sync
from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from inference.api import NpyParser
from inference.serving import DeploymentNotFound, DeploymentUnavailable, deployment_config, deployment_name_for
from inference.wire.decoding import RequestTooLarge, decode_slot, request_budget
from inference.wire.payloads import PayloadError, bool_list, float_list
from labeling import access
from labeling.gate.auth import DEPLOYMENT_AUTHENTICATION, client_id
from labeling.gate.throttles import ApiRateThrottle, RewardsRateThrottle
from labeling.image_budget import ImageTooLarge
from labeling.images import ImageError, check_image, decode_rgb
from training.vlm.parse import label_parse
from training.vlm.rewards import trend_reward
from training.vlm.wire import MAX_IMAGES, MAX_NEW_TOKENS, WindowRequest
from webapp.common.parsers import BoundedJSONParser

from .chat_prompt import chat_prompt_pick
from .prompt_notes import prompt_mismatch_note
from .serving import (
    REWARD_MODES,
    NotAVLMDeployment,
    StreamStep,
    TooManyStreams,
    stream_rewards,
    vlm_deployment,
    windows_infer,
    windows_rewards,
)

MAX_WINDOWS = 64
MAX_STEPS = 256
MAX_FRAMES_PER_VIEW = MAX_IMAGES // 2


class BadRequest(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid_request_error"


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "service_unavailable"


def frames_decode(frames: Sequence[tuple[object, str]]) -> list[np.ndarray]:
    """Decode many frames as one request: count, header sizes and total pixels are checked first.

    Each item is (base64 text or checked array, where it came from for error messages). Over a limit:
    413 naming the setting; a bad frame: 400 naming the frame."""
    budget = request_budget(max_images=MAX_WINDOWS * MAX_IMAGES)
    try:
        budget.count(len(frames))
    except ImageTooLarge as exc:
        raise RequestTooLarge(str(exc)) from None
    for value, where in frames:
        try:
            if isinstance(value, np.ndarray):
                budget.charge_size(int(value.shape[1]), int(value.shape[0]))
            else:
                budget.charge(_base64_bytes(value, where))
        except ImageTooLarge as exc:
            raise RequestTooLarge(f"{where}: {exc}") from None
        except ImageError:
            pass  # decoding below names the problem
    with decode_slot():
        return [image_decode(value, where) for value, where in frames]


def _base64_bytes(text: object, where: str) -> bytes:
    if not isinstance(text, str) or not text:
        raise BadRequest(f"{where}: expected a base64-encoded PNG or JPEG string")
    if text.startswith("data:"):
        text = text.split(",", 1)[1] if "," in text else ""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(f"{where}: {exc}") from None


def image_decode(text: object, where: str):
    """A uint8 HxWx3 array from base64 PNG/JPEG (a data URL is fine); BadRequest naming `where` if not.
    Frames that came as a checked `.npy` array pass through."""
    if isinstance(text, np.ndarray):
        return np.ascontiguousarray(text)
    if not isinstance(text, str) or not text:
        raise BadRequest(f"{where}: expected a base64-encoded PNG or JPEG string")
    if text.startswith("data:"):
        text = text.split(",", 1)[1] if "," in text else ""
    try:
        raw = base64.b64decode(text, validate=True)
        limits = {"max_side": settings.MAX_IMAGE_SIDE, "max_pixels": settings.MAX_IMAGE_PIXELS}
        return decode_rgb(check_image(raw, **limits, inflate=False).data)  # the decoder refuses bad data itself
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(f"{where}: {exc}") from None
    except ImageError as exc:
        raise BadRequest(f"{where}: {exc}") from None


def _allowed(request, name: str) -> None:
    """404 unless the deployment exists and the caller sees it, 403 unless it may ask it for rewards."""
    try:
        config = async_to_sync(deployment_config)(name)
    except DeploymentNotFound as exc:
        raise exceptions.NotFound(str(exc)) from None
    access.require(request.user, access.REWARDS, config, not_found=f"no deployment named {name!r}")


def _deployment(request, name: str, **overrides):
    _allowed(request, name)
    try:
        return async_to_sync(vlm_deployment)(name, **overrides)
    except DeploymentNotFound as exc:
        raise exceptions.NotFound(str(exc)) from None
    except NotAVLMDeployment as exc:
        raise BadRequest(str(exc)) from None
    except ValueError as exc:  # a bad label mapping override
        raise BadRequest(str(exc)) from None


def _client(user) -> str:
    return client_id(user)


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


class VLMWindowSerializer(serializers.Serializer):
    main = serializers.ListField(child=Base64FrameField(), min_length=1, max_length=MAX_FRAMES_PER_VIEW)
    extra = serializers.ListField(child=Base64FrameField(), min_length=1, max_length=MAX_FRAMES_PER_VIEW)
    env_reward = serializers.FloatField(default=0.0)
    env_success = serializers.BooleanField(default=False)


class VLMStreamStepSerializer(serializers.Serializer):
    stream = serializers.CharField(max_length=100, help_text="One per parallel env (e.g. the env index).")
    main = Base64FrameField(help_text="This step's main-view frame, base64 PNG/JPEG.")
    extra = Base64FrameField(help_text="This step's extra-view frame, base64 PNG/JPEG.")
    env_reward = serializers.FloatField(default=0.0)
    env_success = serializers.BooleanField(default=False)
    done = serializers.BooleanField(default=False, help_text="Clears the stream's buffer after this step.")
    reset = serializers.BooleanField(default=False, help_text="Clears the stream's buffer before this step.")


class VLMRewardsRequestSerializer(serializers.Serializer):
    reward_mode = serializers.ChoiceField(choices=[*REWARD_MODES, "window"], required=False)
    windows = serializers.ListField(child=VLMWindowSerializer(), required=False, max_length=MAX_WINDOWS)
    steps = serializers.ListField(child=VLMStreamStepSerializer(), required=False, max_length=MAX_STEPS)
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


class VLMItemSerializer(serializers.Serializer):
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


class VLMRewardsResponseSerializer(serializers.Serializer):
    deployment = serializers.CharField()
    version = serializers.IntegerField()
    reward_mode = serializers.CharField()
    prompt = serializers.CharField()
    label_rewards = serializers.DictField(child=serializers.FloatField())
    gt_success_bonus = serializers.FloatField()
    items = VLMItemSerializer(many=True)


def npy_body(raw: bytes) -> np.ndarray:
    """A uint8 [B,2,H,W,3] (steps) or [B,2,T,H,W,3] (windows) array from an `.npy` body."""
    try:
        array = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise BadRequest(f"body is not a readable .npy array: {exc}") from None
    if array.dtype != np.uint8 or array.ndim not in (5, 6) or array.shape[1] != 2 or array.shape[-1] != 3:
        raise BadRequest(
            f"send uint8 [B,2,H,W,3] (one step per stream, two views) or [B,2,T,H,W,3] (windows), got "
            f"{array.dtype} {list(array.shape)}"
        )
    limit = MAX_STEPS if array.ndim == 5 else MAX_WINDOWS
    if not 1 <= array.shape[0] <= limit:
        raise BadRequest(f"send 1 to {limit} items, got {array.shape[0]}")
    if array.ndim == 6 and array.shape[2] > MAX_FRAMES_PER_VIEW:
        raise BadRequest(f"at most {MAX_FRAMES_PER_VIEW} frames per view")
    side = settings.MAX_IMAGE_SIDE
    if not (1 <= array.shape[-3] <= side and 1 <= array.shape[-2] <= side):
        raise BadRequest(f"frames must be at most {side} px a side")
    return array


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


class VLMRewardsView(APIView):
    """Trend rewards from a deployed Qwen3-VL."""

    parser_classes = [NpyParser, BoundedJSONParser]
    throttle_classes = [ApiRateThrottle, RewardsRateThrottle]
    authentication_classes = DEPLOYMENT_AUTHENTICATION

    @extend_schema(
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
        request={"application/json": VLMRewardsRequestSerializer, "application/x-npy": OpenApiTypes.BINARY},
        parameters=[
            OpenApiParameter("streams", str, description=".npy only: stream names, comma-separated (default 0..B-1)."),
            OpenApiParameter("env_rewards", str, description=".npy only: env rewards, comma-separated."),
            OpenApiParameter("env_success", str, description=".npy only: env success flags (1/0), comma-separated."),
            OpenApiParameter("dones", str, description=".npy only: done flags (1/0), comma-separated."),
            OpenApiParameter("resets", str, description=".npy only: reset flags (1/0), comma-separated."),
        ],
        responses={
            200: VLMRewardsResponseSerializer,
            400: OpenApiResponse(description="Bad images or fields, or not a VLM deployment (the detail says which)."),
            401: OpenApiResponse(description="Missing or unknown token."),
            404: OpenApiResponse(description="No such deployment."),
            503: OpenApiResponse(description="Deployment unhealthy or no inference worker answered."),
        },
    )
    def post(self, request, name: str):
        _allowed(request, name)
        content_type = (request.content_type or "").split(";")[0].strip()
        raw = npy_request(request) if content_type == NpyParser.media_type else request.data
        body = VLMRewardsRequestSerializer(data=raw)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        deployment = _deployment(
            request, name, label_rewards=data.get("label_rewards"), gt_success_bonus=data.get("gt_success_bonus")
        )
        try:
            if data["reward_mode"] == "window":
                frames = [
                    (f, f"windows[{i}].{view}[{j}]")
                    for i, w in enumerate(data["windows"])
                    for view in ("main", "extra")
                    for j, f in enumerate(w[view])
                ]
                decoded = iter(frames_decode(frames))
                windows = [
                    {
                        "main": [next(decoded) for _ in w["main"]],
                        "extra": [next(decoded) for _ in w["extra"]],
                        "env_reward": w["env_reward"],
                        "env_success": w["env_success"],
                    }
                    for w in data["windows"]
                ]
                items = async_to_sync(windows_rewards)(
                    deployment, windows, generate=data["generate"], max_new_tokens=data["max_new_tokens"]
                )
            else:
                decoded = iter(
                    frames_decode(
                        [
                            (s[view], f"steps[{i}].{view}")
                            for i, s in enumerate(data["steps"])
                            for view in ("main", "extra")
                        ]
                    )
                )
                steps = [
                    StreamStep(
                        stream=s["stream"],
                        main=next(decoded),
                        extra=next(decoded),
                        env_reward=s["env_reward"],
                        env_success=s["env_success"],
                        done=s["done"],
                        reset=s["reset"],
                    )
                    for i, s in enumerate(data["steps"])
                ]
                items = async_to_sync(stream_rewards)(
                    deployment,
                    steps,
                    client=_client(request.user),
                    generate=data["generate"],
                    max_new_tokens=data["max_new_tokens"],
                )
        except DeploymentUnavailable as exc:
            raise ServiceUnavailable(str(exc)) from None
        except TooManyStreams as exc:
            raise exceptions.Throttled(detail=str(exc)) from None
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


# ---- OpenAI-compatible chat completions ------------------------------------------------------------


class ChatCompletionRequestSerializer(serializers.Serializer):
    model = serializers.CharField(
        max_length=200, help_text="The deployment's name or one of its aliases, case-insensitively."
    )
    messages = serializers.ListField(child=serializers.DictField(), min_length=1, max_length=MAX_IMAGES + 16)
    max_tokens = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=MAX_NEW_TOKENS)
    max_completion_tokens = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_NEW_TOKENS
    )
    temperature = serializers.FloatField(
        required=False, allow_null=True, min_value=0.0, help_text="Accepted; decoding is always greedy."
    )
    n = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=1)
    stream = serializers.BooleanField(required=False, default=False)


def chat_window(messages: list[dict]) -> tuple[list, str | None]:
    """(images, prompt) from the user messages: every image_url part (or video part's frames) in order,
    text parts joined. Two video parts (main, then extra view) flatten into the same window as their
    frames sent as image parts; a video-layout model splits it back into the two videos."""
    images: list[tuple[str, str]] = []  # (data URL, where it was in the request)
    texts: list[str] = []
    video_lengths: list[int] = []
    for m, message in enumerate(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        if not isinstance(content, list):
            raise BadRequest(f"messages[{m}].content must be a string or a list of parts")
        for p, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                texts.append(str(part.get("text", "")))
            elif kind == "video":
                # a video as its frames (Qwen / vLLM style): {"type": "video", "video": [data URL, ...]}
                frames = part.get("video")
                if not isinstance(frames, list) or not frames or not all(isinstance(f, str) for f in frames):
                    raise BadRequest(f"messages[{m}].content[{p}].video must be a non-empty list of image data URLs")
                if len(images) + len(frames) > MAX_IMAGES:
                    raise RequestTooLarge(f"at most {MAX_IMAGES} frames per request; counted before decoding any")
                for f, url in enumerate(frames):
                    if not url.startswith("data:image/"):
                        raise BadRequest(f"messages[{m}].content[{p}].video[{f}]: only base64 image data URLs")
                    images.append((url, f"messages[{m}].content[{p}].video[{f}]"))
                video_lengths.append(len(frames))
            elif kind == "image_url":
                url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else None
                if not isinstance(url, str) or not url.startswith("data:image/"):
                    raise BadRequest(
                        f"messages[{m}].content[{p}]: only base64 data URLs (data:image/...;base64,...) are accepted"
                    )
                images.append((url, f"messages[{m}].content[{p}].image_url"))
                if len(images) > MAX_IMAGES:
                    raise RequestTooLarge(f"at most {MAX_IMAGES} images per request; counted before decoding any")
            else:
                raise BadRequest(f"messages[{m}].content[{p}]: unsupported part type {kind!r}")
    if not images:
        raise BadRequest("the user message has no image_url parts; send the window's frames as images")
    if video_lengths and (
        len(video_lengths) != 2 or video_lengths[0] != video_lengths[1] or sum(video_lengths) != len(images)
    ):
        raise BadRequest(
            "send a window as two video parts of equal length (main view, then extra view) and no image parts, "
            f"or as image parts only; got videos of {video_lengths} frames and {len(images)} frames in all"
        )
    prompt = "\n".join(t for t in texts if t.strip()) or None
    return frames_decode(images), prompt


class ChatCompletionsView(APIView):
    """OpenAI-compatible `POST /v1/chat/completions` for a deployed VLM."""

    throttle_classes = [ApiRateThrottle, RewardsRateThrottle]
    authentication_classes = DEPLOYMENT_AUTHENTICATION

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        detail = response.data.get("detail") if isinstance(response.data, dict) else response.data
        code = getattr(exc, "default_code", None) or "error"
        response.data = {"error": {"message": str(detail), "type": str(code), "code": response.status_code}}
        return response

    @extend_schema(
        operation_id="chat_completions",
        summary="OpenAI-compatible chat completions for a VLM deployment",
        description=(
            "`model` names the deployment (its name or an alias, case-insensitively). Concurrent requests are "
            "batched by the inference workers; `usage` counts the prompt's and the completion's tokens. The "
            "user message holds the window's frames as base64 `image_url` "
            "parts (main view, then extra view) and the prompt as text. The deployment's `chat_prompt` says which "
            "prompt judges it: `trained` (default: the model's trained prompt, the text only compared) or `request` "
            "(the request's text when it sends one); `reward_studio.prompt` says which, and whether the request's "
            "task text differs from the trained one. "
            "Greedy decoding with `max_tokens` (default 16); `temperature` is accepted and ignored. The "
            "response adds `reward_studio` with label probabilities, the parsed label and its reward."
        ),
        request=ChatCompletionRequestSerializer,
        responses={200: OpenApiResponse(description="An OpenAI chat.completion object.")},
    )
    def post(self, request):
        body = ChatCompletionRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data.get("stream"):
            raise BadRequest("stream=true is not supported")
        try:
            name = deployment_name_for(data["model"])
        except DeploymentNotFound as exc:
            raise exceptions.NotFound(str(exc)) from None
        deployment = _deployment(request, name)  # who may ask it, before any image is read
        images, prompt = chat_window(data["messages"])  # counted and size-checked before decoding
        max_tokens = data.get("max_completion_tokens") or data.get("max_tokens") or 16
        pick = chat_prompt_pick(
            prompt,
            trained=deployment.prompt,
            use=deployment.chat_prompt,
            template=deployment.prompt_template,
            trained_task=deployment.task,
            window_size=deployment.window_size,
        )
        prompt_mismatch_note(deployment.config.id, pick)
        window = WindowRequest(images, pick.prompt, generate=True, max_new_tokens=max_tokens)
        try:
            result = async_to_sync(windows_infer)(deployment.config, [window])[0]
        except DeploymentUnavailable as exc:
            raise ServiceUnavailable(str(exc)) from None
        text = result.get("text") or ""
        label = label_parse(text)
        return Response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": deployment.config.name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": int(result.get("prompt_tokens") or 0),
                    "completion_tokens": int(result.get("completion_tokens") or 0),
                    "total_tokens": int(result.get("prompt_tokens") or 0) + int(result.get("completion_tokens") or 0),
                },
                "reward_studio": {
                    "label": label,
                    "label_from_probabilities": result["label"],
                    "probabilities": result["probabilities"],
                    "reward": trend_reward(label, config=deployment.reward),
                    "version": deployment.config.version,
                    "prompt": pick.report(),
                },
            }
        )
