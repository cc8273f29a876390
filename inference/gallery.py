"""Served-frames gallery: keep every k-th frame a deployment serves, off the request's critical path.

A Redis counter per deployment numbers the served frames across web processes; frames whose number is
a multiple of `sample_every` are written (PNG + ServedFrame row) by a background thread.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections

from training.resnet.wire import frame_at

from .broker import SAMPLE_COUNTER_PREFIX, load_npy
from .serving import DeploymentConfig, abroker

log = logging.getLogger(__name__)
KEEP_FRAMES = 2000  # per deployment; older unlabeled frames are deleted
_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="served-frames")


async def sample_served(config: DeploymentConfig, payload: bytes, probabilities: list[float | None]) -> int:
    """Queue the frames of this batch that fall on the sampling grid; returns how many."""
    every = config.sample_every
    if every <= 0 or not probabilities:
        return 0
    n = len(probabilities)
    end = await abroker().redis.incrby(f"{SAMPLE_COUNTER_PREFIX}{config.name}:{config.id}", n)
    start = end - n
    picks = {i: p for i, p in enumerate(probabilities) if (start + i) % every == 0 and p is not None}
    if picks:
        _writer.submit(_store, config, payload, list(picks), list(picks.values()))
    return len(picks)


def _store(config: DeploymentConfig, payload: bytes, picks: list[int], probabilities: list[float]) -> None:
    from .services import served_frame_create, served_frames_prune

    close_old_connections()
    try:
        images = load_npy(payload)
        for index, probability in zip(picks, probabilities, strict=True):
            served_frame_create(
                deployment_id=config.id,
                image=frame_at(images, index),
                probability=probability,
                success=probability > config.reward.threshold,
                model_version=config.version,
            )
        served_frames_prune(deployment_id=config.id, keep=KEEP_FRAMES)
    except Exception:  # the gallery is best effort; serving must not notice
        log.exception("could not keep served frames of deployment %s", config.name)
    finally:
        close_old_connections()


def wait_for_writes() -> None:
    """Block until queued frames are written (tests)."""
    _writer.submit(lambda: None).result()
