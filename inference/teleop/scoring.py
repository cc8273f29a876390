"""Scoring one live frame with a deployment's model through the inference workers (never in-process).

Thin over the server app's `inference.serving` (`deployment_config` + `infer_payload`): the
deployment's settings come from its short in-process cache, so 20 Hz streams make no database query
per frame. The reward is computed with the deployment's own settings (per-step, as a live stream is).
A VLM deployment judges windows: each frame joins the stream's step buffer in Redis (the same buffers as
the `history_vlm` REST mode), so any inference worker can score it, and the probability shown is
P(positive progress).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from inference.broker import dump_npy
from inference.rewards import combine, model_output
from inference.serving import DeploymentNotFound, DeploymentUnavailable, deployment_config, infer_payload

__all__ = ["DeploymentNotFound", "DeploymentUnavailable", "FrameScore", "score_frame"]


@dataclass(frozen=True)
class FrameScore:
    probability: float
    success: bool
    reward: float
    threshold: float
    inference_ms: float


async def score_frame(
    deployment: str, image: np.ndarray, env_reward: float = 0.0, timeout: float = 10.0, *, stream: str = "live"
) -> FrameScore:
    """Probability, success and reward for one uint8 HxWx3 frame of a live `stream`.

    Raises DeploymentNotFound or DeploymentUnavailable (unhealthy, no worker answered in `timeout`).
    """
    config = await deployment_config(deployment)
    if config.kind == "vlm":
        return await _score_vlm_step(deployment, image, env_reward, stream)
    started = time.perf_counter()
    results = await infer_payload(config, dump_npy(image[None]), timeout=timeout)
    elapsed = (time.perf_counter() - started) * 1000
    first = results[0]
    probability = float(first["probability"] if isinstance(first, dict) else first)
    reward = combine(env_reward, model_output(probability, config.reward), config.reward)
    return FrameScore(
        probability=probability,
        success=probability > config.reward.threshold,
        reward=reward,
        threshold=config.reward.threshold,
        inference_ms=elapsed,
    )


async def _score_vlm_step(name: str, image: np.ndarray, env_reward: float, stream: str) -> FrameScore:
    from inference.vlm.serving import StreamStep, stream_rewards, vlm_deployment

    started = time.perf_counter()
    deployment = await vlm_deployment(name)
    step = StreamStep(stream=stream, main=image, extra=image, env_reward=env_reward)
    [item] = await stream_rewards(deployment, [step], client="teleop", generate=False, max_new_tokens=0, pad=True)
    probabilities = item["probabilities"] or {}
    probability = float(probabilities.get("positive", 0.0))
    threshold = deployment.config.reward.threshold
    return FrameScore(
        probability=probability,
        success=probability > threshold,
        reward=float(item["reward"]),
        threshold=threshold,
        inference_ms=(time.perf_counter() - started) * 1000,
    )
