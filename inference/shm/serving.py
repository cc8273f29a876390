"""The web side of same-host frames (inference.shm.frames): what it reads itself, and when.

The inference worker reads a batch's frames from the client's segment. The web process reads them only
where it needs pixels: a request whose reward mode scores some items only (they are sent on as an `.npy`
body), and, once the answer is known, the frames the served-frames gallery (`sample_every`) or the
reward-hacking monitor (model and env disagree) may keep: read before the answer goes out, since the
client reuses its segment for the next batch as soon as it has its answer.
"""

from __future__ import annotations

import asyncio

import numpy as np
from django.conf import settings

from ..broker import LARGE_PAYLOAD_BYTES, dump_npy
from ..monitor import rules as monitor
from ..serving import DeploymentConfig
from .frames import SegmentError, ShmDescriptor, client_key, descriptor_parse, segment_check, segment_read


def request_descriptor(body: bytes, client: str) -> ShmDescriptor:
    """The checked descriptor of a same-host request from `client` ("a12", "n10.0.0.5"): PayloadError (400;
    SegmentError when the segment cannot be used here) or PayloadTooLarge (413) say what is wrong."""
    if not settings.SHM_ENABLED:
        raise SegmentError("the same-host path is off on this server (SHM_ENABLED=0): send the frames as .npy")
    descriptor = descriptor_parse(
        body,
        key=client_key(settings.SECRET_KEY, client),
        max_side=settings.MAX_IMAGE_SIDE,
        max_request_pixels=settings.MAX_REQUEST_PIXELS,
    )
    segment_check(descriptor)
    return descriptor


async def shm_frames(descriptor: ShmDescriptor) -> np.ndarray:
    """The frames, read from a thread when large (the event loop never copies megabytes)."""
    if descriptor.nbytes >= LARGE_PAYLOAD_BYTES:
        return await asyncio.to_thread(segment_read, descriptor)
    return segment_read(descriptor)


async def shm_kept_frames(
    config: DeploymentConfig,
    descriptor: ShmDescriptor,
    probabilities: list[float | None],
    env_success: list[bool] | None,
) -> bytes:
    """The batch as an `.npy` body when the gallery or the monitor may keep some of its frames; else empty."""
    if config.sample_every > 0 or monitor.disagreements(probabilities, config.reward.threshold, env_success):
        return dump_npy(await shm_frames(descriptor))
    return b""
