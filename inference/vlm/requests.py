"""What every VLM request carries, read the same way for the rewards and the chat endpoints: its deployment
(404 unless the caller sees it, 403 unless it may ask it for rewards, 400 unless it is a VLM) and its frames
(counted, size-checked and budgeted before the first pixel is decoded; a bad frame is named)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from asgiref.sync import async_to_sync
from django.conf import settings
from rest_framework import exceptions

from common.images.budget import ImageTooLarge
from common.images.checks import ImageError, check_image, decode_rgb
from inference import permissions as inference_perms
from inference.serving import DeploymentNotFound, deployment_config
from inference.wire.decoding import RequestTooLarge, decode_slot, request_budget
from inference.wire.errors import BadRequest
from inference.wire.npy_header import npy_array
from inference.wire.payloads import PayloadError, base64_image
from projects import access
from training.vlm.wire import MAX_IMAGES

from .serving import NotAVLMDeployment, VLMDeployment, vlm_deployment

MAX_WINDOWS = 64
MAX_STEPS = 256
MAX_FRAMES_PER_VIEW = MAX_IMAGES // 2


def deployment_allowed(request, name: str) -> None:
    """403 naming the scope for a token without `rewards`; 404 unless the deployment exists and the caller sees
    it; 403 unless it may ask it for rewards."""
    access.require_token_scope(request.user, inference_perms.REWARDS)
    try:
        config = async_to_sync(deployment_config)(name)
    except DeploymentNotFound as exc:
        raise exceptions.NotFound(str(exc)) from None
    access.require(request.user, inference_perms.REWARDS, config, not_found=f"no deployment named {name!r}")


def vlm_deployment_for(request, name: str, **overrides) -> VLMDeployment:
    """The VLM deployment `name` for this caller (see `deployment_allowed`), with `overrides` applied."""
    deployment_allowed(request, name)
    try:
        return async_to_sync(vlm_deployment)(name, **overrides)
    except DeploymentNotFound as exc:
        raise exceptions.NotFound(str(exc)) from None
    except (NotAVLMDeployment, ValueError) as exc:  # ValueError: a bad label mapping override
        raise BadRequest(str(exc)) from None


def frames_decode(frames: Sequence[tuple[object, str]]) -> list[np.ndarray]:
    """Decode many frames as one request: count, header sizes and total pixels are checked first.

    Each item is (base64 text or checked array, where it came from for error messages). Over a limit:
    413 naming the setting; a bad frame: 400 naming the frame."""
    budget = request_budget(max_images=MAX_WINDOWS * MAX_IMAGES)
    try:
        budget.count(len(frames))
    except ImageTooLarge as exc:
        raise RequestTooLarge(str(exc)) from None
    encoded: list[np.ndarray | bytes] = []
    for value, where in frames:
        try:
            if isinstance(value, np.ndarray):
                budget.charge_size(int(value.shape[1]), int(value.shape[0]))
                encoded.append(value)
                continue
            raw = base64_image(value, where)
            encoded.append(raw)
            budget.charge(raw)
        except PayloadError as exc:
            raise BadRequest(str(exc)) from None
        except ImageTooLarge as exc:
            raise RequestTooLarge(f"{where}: {exc}") from None
        except ImageError:
            pass  # decoding below names the problem
    with decode_slot():
        return [_decoded(value, where) for value, (_, where) in zip(encoded, frames, strict=True)]


def _decoded(value: np.ndarray | bytes, where: str) -> np.ndarray:
    """A uint8 HxWx3 array from an encoded PNG/JPEG (BadRequest naming `where` if it is none); a checked
    `.npy` frame passes through."""
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value)
    limits = {"max_side": settings.MAX_IMAGE_SIDE, "max_pixels": settings.MAX_IMAGE_PIXELS}
    try:
        return decode_rgb(check_image(value, **limits, inflate=False).data)  # the decoder refuses bad data itself
    except (ImageError, ValueError) as exc:
        raise BadRequest(f"{where}: {exc}") from None


def npy_body(raw: bytes) -> np.ndarray:
    """A uint8 [B,2,H,W,3] (steps) or [B,2,T,H,W,3] (windows) array from an `.npy` body, a view of it (its
    header read without numpy's general parser when `np.save` wrote it, `inference.wire.npy_header`)."""
    try:
        array = npy_array(raw)
        if array is None:  # another writer's header: numpy's own reader
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
