"""Web side of VLM trend rewards: windows and per-stream step buffers -> the inference workers -> rewards.

The web process never loads a model: windows are packed (`training.vlm.wire`) and sent through the
server app's broker (`inference.serving.infer_payload`). Written once, for asyncio like the serving core:
teleop's consumer awaits it, the DRF views call it through `async_to_sync`. Per-stream buffers for
`history_vlm` (RLinf's newer name: `buffered_vlm`) live in Redis, keyed by deployment, client and stream,
so several web processes can serve one RL run: each step pushes both views' frames, and windows are scored by RLinf's
HistoryManager counting (`inference.rewards.history_window`: `count % input_interval == 0` once
`min_history_size` steps exist, `input_on_done`). Rewards: the label mapping (+ `gt_success_bonus` per
step where the env reports success), then the deployment's combine formula
`env_reward_weight * env_reward + reward_weight * model_output`, with `history_reward_assign` info.
Buffers are bounded: a client (agent or person, as authenticated) keeps at most VLM_MAX_STREAMS live streams
per deployment (more answer 429) holding at most VLM_CLIENT_BUFFER_MAX_BYTES of frames (a step that would
take the client past it answers 429 before anything is written: the bytes each stream keeps are counted
exactly, from a list of its records' sizes kept beside it), and a stream's buffer expires
VLM_STREAM_TTL_S after its last step, so invented stream names or huge frames cannot fill Redis. The
pipelines that carry frames never let redis-py raise (its error message renders every argument:
`inference.broker.pipeline_run`), so a Redis that refuses writes answers a 503 at once. Redis is the broker's asyncio client; ORM reads go through
`common.db_bridge.orm_call`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from django.conf import settings

from common.db_bridge import orm_call
from inference.broker import BrokerError, RedisRefused, dump_npy, pipeline_run
from inference.coalesce import Coalescer
from inference.rewards import RewardSettings, combine, compute_rewards, history_window
from inference.serving import (
    DeploymentBusy,
    DeploymentConfig,
    DeploymentNotFound,
    DeploymentUnavailable,
    abroker,
    deployment_config,
    infer_payload,
)
from inference.vlm.budget import OVER_GLOBAL, OVER_PROJECT, budget_entry, budget_reserve, budget_settle
from training.families import takes_windows
from training.vlm.labels import LABELS
from training.vlm.prompt import prompt_render
from training.vlm.rewards import TrendRewardConfig, trend_reward
from training.vlm.wire import WindowRequest, pad_records, record_pack, unpack_window

HISTORY_PREFIX = "rs:vlm:hist:"
STREAMS_PREFIX = "rs:vlm:streams:"
BYTES_PREFIX = "rs:vlm:bytes:"  # hash per client and deployment: stream -> bytes its buffer holds
REWARD_MODES = ("history_vlm", "buffered_vlm")


class NotAVLMDeployment(ValueError):
    pass


class TooManyStreams(ValueError):
    """The client already keeps the most streams (or buffered bytes) it may on this deployment (a 429)."""


@dataclass
class VLMDeployment:
    config: DeploymentConfig
    prompt: str
    reward: TrendRewardConfig
    chat_prompt: str = "trained"  # Deployment.chat_prompt: which prompt a chat request is judged with
    prompt_template: str | None = None
    task: str = ""
    window_size: int = 5


@dataclass
class _ModelPrompt:
    prompt: str
    reward: dict
    chat_prompt: str
    prompt_template: str | None
    task: str
    window_size: int


def _model_prompt_and_reward(deployment_id: int) -> _ModelPrompt | None:
    """The served model's prompt (its own, else its project's rendered template), the template and task it
    renders, the deployment's chat_prompt setting and the model's stored reward mapping."""
    from inference.models import Deployment

    row = Deployment.objects.select_related("trained_model__project").filter(pk=deployment_id).first()
    if row is None:
        return None
    model = row.trained_model
    stored = model.config or {}
    project = model.project
    template = stored.get("prompt_template") or project.prompt_template
    task = str(stored.get("task") or project.task_description)
    window_size = int(stored.get("window_size") or project.window_size)
    prompt = stored.get("prompt") or prompt_render(template, task=task, window_size=window_size)
    return _ModelPrompt(prompt, dict(stored.get("reward") or {}), row.chat_prompt, template, task, window_size)


async def vlm_deployment(
    name: str, *, label_rewards: dict | None = None, gt_success_bonus: float | None = None
) -> VLMDeployment:
    """The deployment's settings, prompt and label mapping (request overrides on top of the model's)."""
    config = await deployment_config(name)
    if not takes_windows(config.kind):
        raise NotAVLMDeployment(f"deployment {name!r} serves a {config.kind} model, not a VLM")
    found = await orm_call(_model_prompt_and_reward, config.id)
    if found is None:
        raise DeploymentNotFound(f"no deployment named {name!r}")
    stored = found.reward
    if label_rewards:
        stored["label_rewards"] = {**(stored.get("label_rewards") or {}), **label_rewards}
    if config.reward.gt_success_bonus:
        stored["gt_success_bonus"] = config.reward.gt_success_bonus
    if gt_success_bonus is not None:
        stored["gt_success_bonus"] = gt_success_bonus
    return VLMDeployment(
        config=config,
        prompt=found.prompt,
        reward=TrendRewardConfig.from_dict(stored),
        chat_prompt=found.chat_prompt,
        prompt_template=found.prompt_template,
        task=found.task,
        window_size=found.window_size,
    )


async def _windows_send(key: tuple[DeploymentConfig, float | None], records: list[bytes]) -> list[dict]:
    config, timeout = key
    return await infer_payload(config, dump_npy(pad_records(records)), timeout=timeout)


_windows_send_joint = Coalescer(_windows_send)


async def windows_infer(
    config: DeploymentConfig, windows: list[WindowRequest], *, timeout: float | None = None
) -> list[dict]:
    """Per-window results from the workers: probabilities, label, and generated text when asked. Windows
    sent for the same deployment in the same event-loop turn (concurrent streams) travel as one request."""
    if not windows:
        return []
    records = [record_pack(window) for window in windows]  # a malformed window fails only its own caller
    return await _windows_send_joint((config, timeout), records)


def item_reward(
    deployment: VLMDeployment, result: dict, *, env_reward: float, env_success: bool, use_text: bool
) -> dict:
    label = result["parsed"] if use_text else result["label"]
    output = trend_reward(label, config=deployment.reward, env_success=env_success)
    return {
        "scored": True,
        "label": label,
        "probabilities": result["probabilities"],
        "text": result.get("text"),
        "model_output": output,
        "reward": combine(env_reward, output, deployment.config.reward),
    }


async def windows_rewards(
    deployment: VLMDeployment, windows: list[dict], *, generate: bool, max_new_tokens: int
) -> list[dict]:
    """`windows`: [{"main": [frames], "extra": [frames], "env_reward", "env_success"}] (frames uint8 HxWx3)."""
    requests = [
        WindowRequest([*w["main"], *w["extra"]], deployment.prompt, generate=generate, max_new_tokens=max_new_tokens)
        for w in windows
    ]
    results = await windows_infer(deployment.config, requests)
    return [
        item_reward(deployment, r, env_reward=w["env_reward"], env_success=w["env_success"], use_text=generate)
        for w, r in zip(windows, results, strict=True)
    ]


@dataclass
class StreamStep:
    stream: str
    main: np.ndarray
    extra: np.ndarray
    env_reward: float = 0.0
    env_success: bool = False
    done: bool = False
    reset: bool = False
    window: list[list[np.ndarray]] = field(default_factory=list)  # buffered [main, extra] pairs
    count: int = 0
    window_size: int = 0  # steps in the window scored at this step (0: none)


def _stream_key(deployment: VLMDeployment, client: str, stream: str) -> str:
    return f"{HISTORY_PREFIX}{deployment.config.name}:{deployment.config.id}:{client}:{stream}"


def _streams_key(deployment: VLMDeployment, client: str) -> str:
    return f"{STREAMS_PREFIX}{deployment.config.name}:{deployment.config.id}:{client}"


def _bytes_key(deployment: VLMDeployment, client: str) -> str:
    return f"{BYTES_PREFIX}{deployment.config.name}:{deployment.config.id}:{client}"


def _step_bytes(step: StreamStep) -> int:
    return sum(int(getattr(frames, "nbytes", 0)) for frames in (step.main, step.extra))


async def streams_admit(redis, deployment: VLMDeployment, client: str, steps: list[StreamStep]) -> int:
    """Record the steps' streams as live for `client` (a sorted set scored by last use) and reserve their
    frames' bytes in the global budget (`inference.vlm.budget`); the bytes reserved (give them back with
    `budget_settle`). Raise TooManyStreams (a 429) when new names would take the client past VLM_MAX_STREAMS
    live streams, its frames past VLM_CLIENT_BUFFER_MAX_BYTES of buffers (counting what its live streams hold
    now), or its project's buffers past their share (VLM_PROJECT_BUFFERS_MAX_BYTES); DeploymentBusy (a 503
    with Retry-After) when all buffers together would pass VLM_BUFFERS_MAX_BYTES or Redis refuses the write."""
    key, ttl, most = _streams_key(deployment, client), settings.VLM_STREAM_TTL_S, settings.VLM_MAX_STREAMS
    bytes_key, budget = _bytes_key(deployment, client), settings.VLM_CLIENT_BUFFER_MAX_BYTES
    entry = _budget_entry(deployment, client)
    names = sorted({step.stream for step in steps})
    # a step that ends its stream is always let through: its buffer is freed within this request
    incoming = sum(_step_bytes(step) for step in steps if not step.done)
    now = time.time()
    pipe = redis.pipeline(transaction=False)
    pipe.zrangebyscore(key, "-inf", now - ttl)
    pipe.zremrangebyscore(key, "-inf", now - ttl)
    pipe.zmscore(key, names)
    pipe.zcard(key)
    pipe.hgetall(bytes_key)
    budget_reserve(
        pipe,
        entry,
        deployment.config.project_id,
        incoming,
        ttl_s=ttl,
        max_bytes=settings.VLM_BUFFERS_MAX_BYTES,
        project_max_bytes=settings.VLM_PROJECT_BUFFERS_MAX_BYTES,
    )
    stale, _, scores, live, held, (code, holding) = _redis_run(await pipe.execute(raise_on_error=False))
    if code == OVER_GLOBAL:
        raise DeploymentBusy(
            f"the VLM step buffers of all projects hold {holding} bytes and these steps bring {incoming} more, "
            f"past {settings.VLM_BUFFERS_MAX_BYTES} bytes (VLM_BUFFERS_MAX_BYTES): retry when streams finish"
        )
    if code == OVER_PROJECT:
        raise TooManyStreams(
            f"this project's VLM step buffers hold {holding} bytes and these steps bring {incoming} more, past "
            f"its share of {settings.VLM_PROJECT_BUFFERS_MAX_BYTES} bytes (VLM_PROJECT_BUFFERS_MAX_BYTES): finish "
            "streams with done=true, or send smaller or fewer frames"
        )
    try:
        new = sum(1 for score in scores if score is None)
        if live + new > most:
            raise TooManyStreams(
                f"this client already has {live} live streams on deployment {deployment.config.name!r} and may "
                f"keep at most {most} (VLM_MAX_STREAMS); finish streams with done=true or reuse their names"
            )
        gone = {_text(name) for name in stale}
        buffered = sum(int(v) for k, v in held.items() if _text(k) not in gone)
        if buffered + incoming > budget:
            raise TooManyStreams(
                f"this client's step buffers on deployment {deployment.config.name!r} hold {buffered} bytes and "
                f"these steps bring {incoming} more, past {budget} bytes (VLM_CLIENT_BUFFER_MAX_BYTES): finish "
                "streams with done=true, or send smaller or fewer frames"
            )
        pipe = redis.pipeline(transaction=False)
        if gone:
            pipe.hdel(bytes_key, *gone)
        pipe.zadd(key, dict.fromkeys(names, now))
        done = [step.stream for step in steps if step.done]
        if done:
            pipe.zrem(key, *done)
        pipe.expire(key, ttl)
        _redis_run(await pipe.execute(raise_on_error=False))
    except BaseException:
        await _budget_give_back(redis, entry, bytes_key, incoming)
        raise
    return incoming


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _budget_entry(deployment: VLMDeployment, client: str) -> str:
    return budget_entry(deployment.config.project_id, f"{deployment.config.name}:{deployment.config.id}", client)


def _redis_run(replies: list[Any]) -> list[Any]:
    """`pipeline_run`, a refusal (Redis at its maxmemory) as DeploymentBusy: a 503 with Retry-After, never a 500."""
    try:
        return pipeline_run(replies)
    except RedisRefused as exc:
        raise DeploymentBusy(str(exc)) from None


async def _budget_give_back(redis, entry: str, bytes_key: str, reserved: int) -> None:
    """The request is over: its client's budget entry holds what its buffers hold, its reservation is freed.
    Best effort (the script may run at Redis' maxmemory; an entry left behind expires with the buffers)."""
    pipe = redis.pipeline(transaction=False)
    budget_settle(pipe, entry, bytes_key, reserved)
    await pipe.execute(raise_on_error=False)


async def _push_group(
    redis, keys: list[str], steps: list[StreamStep], reward: RewardSettings, ttl: int, bytes_key: str
) -> None:
    """Buffer a group of steps of distinct streams in two round trips: push and count every step, then
    read back the windows of the steps that get scored and clear the streams that are done. Like RLinf's
    HistoryManager, a stream holds up to `history_size + 1` steps when its window is built. Each stream's
    record sizes are kept in a list beside it (`<key>:sz`), so the bytes it holds are known exactly."""
    if not steps:
        return
    keep = reward.history_size + 1
    pipe = redis.pipeline(transaction=False)
    count_at, sizes_at = [], []  # position of each step's INCR and size-list replies
    for key, step in zip(keys, steps, strict=True):
        if step.reset:
            pipe.delete(key, key + ":n", key + ":sz")
        record = record_pack(WindowRequest([step.main, step.extra]))
        pipe.rpush(key, record)
        pipe.ltrim(key, -keep, -1)
        pipe.incr(key + ":n")
        count_at.append(len(pipe.command_stack) - 1)
        pipe.rpush(key + ":sz", len(record))
        pipe.ltrim(key + ":sz", -keep, -1)
        pipe.lrange(key + ":sz", 0, -1)
        sizes_at.append(len(pipe.command_stack) - 1)
        for suffix in ("", ":n", ":sz"):
            pipe.expire(key + suffix, ttl)
    replies = pipeline_run(await pipe.execute(raise_on_error=False))
    for step, at in zip(steps, count_at, strict=True):
        step.count = int(replies[at])
        step.window_size = history_window(step.count, step.done, reward)
    pipe = redis.pipeline(transaction=False)
    reads = [step for step in steps if step.window_size]
    for key, step in zip(keys, steps, strict=True):
        if step.window_size:
            pipe.lrange(key, -step.window_size, -1)
    for key, step in zip(keys, steps, strict=True):
        if step.done:
            pipe.delete(key, key + ":n", key + ":sz")
    held = {step.stream: sum(int(n) for n in replies[at]) for step, at in zip(steps, sizes_at, strict=True)}
    finished = [step.stream for step in steps if step.done]
    kept = {name: n for name, n in held.items() if name not in finished}
    if kept:
        pipe.hset(bytes_key, mapping=kept)
    if finished:
        pipe.hdel(bytes_key, *finished)
    pipe.expire(bytes_key, ttl)
    results = pipeline_run(await pipe.execute(raise_on_error=False))
    for step, records in zip(reads, results, strict=False):
        step.window = [unpack_window(np.frombuffer(raw, dtype=np.uint8)).images for raw in records]


async def steps_buffer(
    redis, deployment: VLMDeployment, client: str, steps: list[StreamStep], reward: RewardSettings
) -> None:
    """Admit the steps (`streams_admit`: the client's, project's and global budgets), buffer them (each step
    learns its count and, where one is scored, its window), then give the reservation back. Redis refusing the
    frames (at its maxmemory) is a DeploymentBusy: a 503 with Retry-After, at once."""
    reserved = await streams_admit(redis, deployment, client, steps)
    bytes_key = _bytes_key(deployment, client)
    try:
        group: list[StreamStep] = []  # consecutive steps of distinct streams go to Redis together
        for step in [*steps, None]:
            if step is None or step.stream in {s.stream for s in group}:
                keys = [_stream_key(deployment, client, s.stream) for s in group]
                try:
                    await _push_group(redis, keys, group, reward, settings.VLM_STREAM_TTL_S, bytes_key)
                except RedisRefused as exc:
                    raise DeploymentBusy(str(exc)) from None
                except BrokerError as exc:
                    raise DeploymentUnavailable(str(exc)) from None
                group = []
            if step is not None:
                group.append(step)
    finally:
        await _budget_give_back(redis, _budget_entry(deployment, client), bytes_key, reserved)


async def stream_rewards(
    deployment: VLMDeployment,
    steps: list[StreamStep],
    *,
    client: str,
    generate: bool,
    max_new_tokens: int,
    pad: bool = False,
) -> list[dict]:
    """One result per step, in order; steps of one stream count in request order (RLinf's counting,
    `inference.rewards.history_window`). A scored window holds the stream's last steps as they are (RLinf
    sends no padding; with `pad`, as for the live dashboard, every step is scored, its window front-padded
    with its oldest step to `history_size`); every step's model output gets the success bonus where the env reports success."""
    redis = abroker().redis
    reward = replace(deployment.config.reward, gt_success_bonus=deployment.reward.gt_success_bonus)
    if pad:  # the live dashboard shows a probability at every step: each step ends a (front-padded) window
        reward = replace(reward, input_interval=1, min_history_size=1)
    await steps_buffer(redis, deployment, client, steps, reward)
    scored_idx, requests = [], []
    for i, step in enumerate(steps):
        if step.window_size:
            frames = step.window
            if pad:
                size = reward.history_size
                frames = ([frames[0]] * (size - len(frames)) + frames)[-size:]
            main = [pair[0] for pair in frames]
            extra = [pair[1] for pair in frames]
            requests.append(
                WindowRequest([*main, *extra], deployment.prompt, generate=generate, max_new_tokens=max_new_tokens)
            )
            scored_idx.append(i)
    results = await windows_infer(deployment.config, requests) if requests else []
    by_step = dict(zip(scored_idx, results, strict=True))
    labels: list[Any] = [  # what the worker parsed: a label, or None when it produced no valid one
        (by_step[i]["parsed"] if generate else by_step[i]["label"]) if i in by_step else None for i in range(len(steps))
    ]
    items = compute_rewards(
        reward,
        [by_step[i]["probability"] if i in by_step else None for i in range(len(steps))],
        scored=[step.window_size for step in steps],
        env_rewards=[step.env_reward for step in steps],
        env_success=[step.env_success for step in steps],
        outputs=[
            trend_reward(labels[i], config=deployment.reward) if i in by_step else None for i in range(len(steps))
        ],
    )
    out = []
    for i, (step, item) in enumerate(zip(steps, items, strict=True)):
        result = by_step.get(i)
        out.append(
            {
                "stream": step.stream,
                "step": step.count - 1,
                "scored": item.scored,
                "label": labels[i],
                "probabilities": result["probabilities"] if result else None,
                "text": result.get("text") if result else None,
                "model_output": item.model_output,
                "reward": item.reward,
                "window": item.window,
                "assign_previous": item.assign_previous,
                "assign_reward": item.assign_reward,
            }
        )
    return out


def label_probabilities_dict(values) -> dict[str, float]:
    return {label: float(v) for label, v in zip(LABELS, values, strict=True)}
