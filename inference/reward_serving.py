"""One reward request end to end on the web side: plan which items the model scores (reward mode),
ask the workers, turn probabilities into rewards, sample served frames for the gallery.

Written once, for asyncio: the ASGI fast path awaits `rewards_answer`, the DRF view calls it through
`async_to_sync`. Both answer with the same JSON, built here.

History-buffer counts live in Redis (per deployment, client and stream, one field per item index), so
several web processes can serve the same RL run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from inference.wire.payloads import bool_list, float_list, id_list

from .broker import HISTORY_PREFIX, dump_npy, load_npy
from .gallery import sample_served
from .monitor.services import ServedBatch, monitor_submit
from .rewards import HISTORY_BUFFER, ItemReward, compute_rewards, plan_scoring, result_parts
from .serving import DeploymentConfig, abroker, infer_payload
from .shm.frames import ShmDescriptor
from .shm.serving import shm_frames, shm_kept_frames

HISTORY_TTL_S = 24 * 3600


@dataclass
class RewardRequest:
    payload: bytes  # validated uint8 [B,H,W,3] .npy
    count: int
    env_rewards: list[float] | None = None
    dones: list[bool] | None = None
    client: str = ""  # who asks (agent id): history streams are per client
    stream: str = ""  # optional stream name within a client (e.g. an RL worker rank)
    env_success: list[bool] | None = None  # per-item env success: gt_success_bonus and the reward-hacking monitor
    episode_ids: list[str] | None = None  # the RL episode of each frame (monitor: success per step)
    timeout: float | None = None  # seconds to wait for the workers (None: INFERENCE_TIMEOUT_S); teleop's is short
    shm: ShmDescriptor | None = None  # same-host frames (checked): `payload` is empty


NPY_FIELDS = ("env_rewards", "dones", "env_success", "stream", "episode_ids")


def npy_fields(query: Mapping[str, str], headers: Mapping[str, str]) -> dict[str, str | None]:
    """The per-request fields of an `.npy` reward request, each from the query string, else from its header
    (`env_rewards` from `X-Env-Rewards`, ...): `headers` must look names up in lower case."""
    return {name: query.get(name, headers.get("x-" + name.replace("_", "-"))) for name in NPY_FIELDS}


def reward_request(payload: bytes, count: int, fields: Mapping[str, object], client: str = "") -> RewardRequest:
    """The one reader of a reward request's fields (the ASGI fast path and the DRF view, `.npy` and JSON):
    lists of `count` values, or comma-separated strings; PayloadError says which one is wrong."""
    return RewardRequest(
        payload=payload,
        count=count,
        env_rewards=float_list(fields.get("env_rewards"), count, "env_rewards"),
        dones=bool_list(fields.get("dones"), count, "dones"),
        client=client,
        stream=str(fields.get("stream") or "")[:100],
        env_success=bool_list(fields.get("env_success"), count, "env_success"),
        episode_ids=id_list(fields.get("episode_ids"), count, "episode_ids"),
    )


def item_json(item: ItemReward) -> dict:
    """The response form of one item."""
    return {
        "probability": item.probability,
        "success": item.success,
        "reward": item.reward,
        "scored": item.scored,
        "model_output": item.model_output,
        "window": item.window,
        "assign_previous": item.assign_previous,
        "assign_reward": item.assign_reward,
        "ood": item.ood,
        "ood_score": item.ood_score,
    }


def rewards_json(config: DeploymentConfig, items: list[ItemReward]) -> dict:
    """The rewards endpoint's answer (the DRF view and the ASGI fast path answer alike)."""
    return {
        "deployment": config.name,
        "version": config.version,
        "reward_mode": config.reward.reward_mode,
        "threshold": config.reward.threshold,
        "items": [item_json(i) for i in items],
    }


async def rewards_answer(config: DeploymentConfig, request: RewardRequest) -> dict:
    """Serve the request and answer it as the endpoint does. Raises DeploymentUnavailable."""
    return rewards_json(config, await rewards_serve(config, request))


async def rewards_serve(config: DeploymentConfig, request: RewardRequest) -> list[ItemReward]:
    """Rewards of the request's items; never blocks the event loop."""
    if config.paused:  # refused even when no item of the request would be scored
        config.check_available()
    n = request.count
    redis = abroker().redis
    history_key = f"{HISTORY_PREFIX}{config.name}:{config.id}:{request.client}:{request.stream}"
    history = None
    if config.reward.reward_mode == HISTORY_BUFFER:
        values = await redis.hmget(history_key, [str(i) for i in range(n)])
        history = [int(v) if v is not None else 0 for v in values]
    scored, counts_after = plan_scoring(config.reward, n, request.dones, history)
    if request.shm is not None and not all(scored):  # some items only: read here, sent on as an .npy body
        request.payload, request.shm = dump_npy(await shm_frames(request.shm)), None
    shm = request.shm.to_header() if request.shm is not None else None
    probabilities: list[float | None] = [None] * n
    ood: list[tuple[bool, float] | None] = [None] * n
    picks: list[int] = []
    results: list = []
    if all(scored):
        results = await infer_payload(config, request.payload, client=request.client, timeout=request.timeout, shm=shm)
        picks = list(range(n))
    elif any(scored):
        picks = [i for i, s in enumerate(scored) if s]
        subset = load_npy(request.payload)[np.asarray(picks)]
        results = await infer_payload(config, dump_npy(subset), client=request.client, timeout=request.timeout)
    for i, result in zip(picks, results, strict=True):
        probabilities[i], ood[i] = result_parts(result)
    if counts_after is not None:
        pipe = redis.pipeline(transaction=False)
        pipe.hset(history_key, mapping={str(i): c for i, c in enumerate(counts_after)})
        pipe.expire(history_key, HISTORY_TTL_S)
        await pipe.execute()
    items = compute_rewards(
        config.reward,
        probabilities,
        scored=scored,
        env_rewards=request.env_rewards,
        env_success=request.env_success,
        ood=ood,
    )
    if request.shm is not None:  # the frames the gallery or the monitor keep, read before the client reuses them
        request.payload = await shm_kept_frames(config, request.shm, probabilities, request.env_success)
    await sample_served(config, request.payload, probabilities)
    monitor_served(config, request, probabilities, [item.ood for item in items])
    return items


def monitor_served(
    config: DeploymentConfig,
    request: RewardRequest,
    probabilities: list[float | None],
    ood: list[bool | None] | None = None,
) -> None:
    """Hand the batch to the reward-hacking monitor's thread (never waits on it); `ood`: each item's
    off-distribution flag (None: not checked)."""
    run = f"{request.client}/{request.stream}" if request.stream else request.client
    batch = ServedBatch(
        config, request.payload, probabilities, request.env_success, request.episode_ids, run, time.time(), ood
    )
    monitor_submit(batch)
