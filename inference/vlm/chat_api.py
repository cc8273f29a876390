"""`POST /v1/chat/completions`: the OpenAI format RLinf's API reward worker speaks, for a deployed VLM.

`model` is the deployment's name or an alias, case-insensitively; a user message holds the window's frames as
base64 `image_url` parts (or video parts) and the prompt as text; `max_tokens`, `temperature`. The answer is the
model's greedy completion, plus a `reward_studio` object with label probabilities and the reward. Errors come
in OpenAI's shape (`{"error": {"message", "type", "code"}}`). Authentication as `inference.vlm.api`.
"""

from __future__ import annotations

import time
import uuid

from asgiref.sync import async_to_sync
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_serializer
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from inference import permissions as inference_perms
from inference.serving import DeploymentNotFound, DeploymentUnavailable, deployment_name_for
from inference.wire.decoding import RequestTooLarge
from inference.wire.errors import BadRequest, unavailable
from projects import access
from projects.gate.auth import DEPLOYMENT_AUTHENTICATION
from projects.gate.throttles import ApiRateThrottle, RewardsRateThrottle
from training.vlm.parse import label_parse
from training.vlm.rewards import trend_reward
from training.vlm.wire import MAX_IMAGES, MAX_NEW_TOKENS, WindowRequest

from .chat_prompt import chat_prompt_pick
from .prompt_notes import prompt_mismatch_note
from .requests import frames_decode, vlm_deployment_for
from .serving import windows_infer

# OpenAI's error types by status (what its clients read); other statuses report the exception's code.
OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


# component_name: the OpenAPI name the body had before the <Thing>In/<Thing>Out naming rule, kept for clients.
@extend_schema_serializer(component_name="ChatCompletionRequest")
class ChatCompletionIn(serializers.Serializer):
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
        kind = OPENAI_ERROR_TYPES.get(response.status_code) or getattr(exc, "default_code", None) or "error"
        response.data = {"error": {"message": str(detail), "type": str(kind), "code": response.status_code}}
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
        request=ChatCompletionIn,
        responses={200: OpenApiResponse(description="An OpenAI chat.completion object.")},
    )
    def post(self, request):
        access.require_token_scope(
            request.user, inference_perms.REWARDS
        )  # before the body: what the token lacks comes first
        body = ChatCompletionIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data.get("stream"):
            raise BadRequest("stream=true is not supported")
        try:
            name = deployment_name_for(data["model"])
        except DeploymentNotFound as exc:
            raise exceptions.NotFound(str(exc)) from None
        deployment = vlm_deployment_for(request, name)  # who may ask it, before any image is read
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
            raise unavailable(exc) from None
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
