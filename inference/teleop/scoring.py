"""Scoring one live frame with a deployment's model through the inference workers (never in-process).

A ResNet frame goes through the REST rewards path (`inference.reward_serving.rewards_serve`), as a
one-item request of the agent (`client`, counted against its share of the queue) on its own `stream`:
the same place turns probabilities into rewards, and the frame reaches the served-frames gallery (every
`sample_every`-th) and the reward-hacking monitor (with the env's success flag and the episode) as a REST
frame does. One difference, on purpose: a live frame is always scored (`per_step`), whatever the
deployment's reward mode, since the operator watches every frame's probability; the reward is then the
deployment's own formula (reward type, weights, bonus) for a scored step. The deployment's settings come
from the serving core's short in-process cache, so 20 Hz streams make no database query per frame.

A VLM deployment judges windows: each frame joins the stream's step buffer in Redis (the same buffers as
the `history_vlm` REST mode), so any inference worker can score it, and the probability shown is
P(positive progress).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from inference.broker import dump_npy
from inference.reward_serving import RewardRequest, rewards_serve
from inference.rewards import PER_STEP
from inference.serving import DeploymentConfig, DeploymentNotFound, DeploymentUnavailable, deployment_config
from training.families import takes_windows

__all__ = ["DeploymentNotFound", "DeploymentUnavailable", "FrameScore", "score_frame"]


@dataclass(frozen=True)
class FrameScore:
    probability: float
    success: bool
    reward: float
    threshold: float
    inference_ms: float
    ood: bool | None = None  # off the model's training distribution (None: the model carries no OOD statistics)


def per_step(config: DeploymentConfig) -> DeploymentConfig:
    """The deployment's settings with every frame scored (see the module's docstring)."""
    if config.reward.reward_mode == PER_STEP:
        return config
    return dataclasses.replace(config, reward=dataclasses.replace(config.reward, reward_mode=PER_STEP))


async def score_frame(
    deployment: str,
    image: np.ndarray,
    env_reward: float = 0.0,
    timeout: float = 10.0,
    *,
    stream: str = "live",
    client: str = "",
    env_success: bool | None = None,
    episode: str | None = None,
) -> FrameScore:
    """Probability, success and reward for one uint8 HxWx3 frame of a live `stream` of `client` (the
    agent, "a<id>"); `env_success` and `episode` feed the reward-hacking monitor (and `gt_success_bonus`).
    `timeout`: seconds to wait for the workers (a live frame is worth little after a few).

    Raises DeploymentNotFound or DeploymentUnavailable (unhealthy, no worker answered in time).
    """
    config = await deployment_config(deployment)
    if takes_windows(config.kind):
        return await _score_vlm_step(deployment, image, env_reward, stream)
    config = per_step(config)
    request = RewardRequest(
        payload=dump_npy(image[None]),
        count=1,
        env_rewards=[env_reward],
        client=client,
        stream=stream,
        env_success=None if env_success is None else [env_success],
        episode_ids=None if episode is None else [episode],
        timeout=timeout,
    )
    started = time.perf_counter()
    [item] = await rewards_serve(config, request)
    elapsed = (time.perf_counter() - started) * 1000
    assert item.probability is not None and item.success is not None  # per_step: every item is scored
    return FrameScore(
        probability=item.probability,
        success=item.success,
        reward=item.reward,
        threshold=config.reward.threshold,
        inference_ms=elapsed,
        ood=item.ood,
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
