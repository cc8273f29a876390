"""Web side of inference: ask the workers for a deployment's per-item results. Written once, for asyncio.

    probabilities = await infer("pick-cube", images)             # uint8 [B,H,W,3] -> list of B floats
    probabilities = async_to_sync(infer)("pick-cube", images)    # the same from sync code (DRF views)

The web process never loads a model. It reads the deployment's settings from a small in-process cache
(`common.stale_cache`: older than CACHE_TTL_S, they are served while one background query refreshes
them, so the hot path makes no database query and never waits for one; a name not found is not kept, so a
deployment made in another process is served at once), pushes the request to Redis with
the version it knows, and waits on the reply key. Errors: DeploymentNotFound (404) and
DeploymentUnavailable (503: unhealthy, no worker answered, or the worker reported an error); its subclass
DeploymentBusy (503 with a `Retry-After` header) when the service is only overloaded: the queue's bounds refused
the request, every Redis connection stayed in use, Redis refused the payload for memory, or live workers did not
answer in time. Clients may retry those (reward_client does); the others need a person.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings

from common.db_bridge import DatabaseThreads, orm_call
from common.redis_clients import payload_redis_from_url, pool_size, redis_from_url
from common.stale_cache import StaleCache

from .broker import (
    WORKERS_KEY,
    AsyncBrokerClient,
    BrokerError,
    InferenceTimeout,
    PoolExhausted,
    QueueBounds,
    QueueFull,
    RedisRefused,
    RequestRejected,
    any_worker_alive,
    dump_npy,
)
from .rewards import RewardSettings

CACHE_TTL_S = 1.0  # a deployment's settings are fresh this long
CACHE_STALE_S = 10.0  # older ones, up to this age, are served while a background query refreshes them


def request_timeout_s() -> float:
    return float(settings.INFERENCE_TIMEOUT_S)


class DeploymentNotFound(LookupError):
    pass


class DeploymentUnavailable(RuntimeError):
    pass


BUSY_RETRY_AFTER_S = 1  # the Retry-After a busy 503 carries: a client's first retry comes no sooner


class DeploymentPaused(DeploymentUnavailable):
    """Paused by its managers: a 503 without `Retry-After` (a client should not retry; a person resumes it)."""


class DeploymentBusy(DeploymentUnavailable):
    """Overloaded, not broken: the same request may succeed when retried (a 503 with `Retry-After`)."""

    retry_after_s = BUSY_RETRY_AFTER_S


@dataclass(frozen=True)
class DeploymentConfig:
    id: int
    name: str
    version: int
    status: str
    error: str
    kind: str
    project_id: int | None
    reward: RewardSettings
    max_batch_size: int
    max_wait_ms: float
    sample_every: int
    paused: bool = False

    @classmethod
    def from_row(cls, row) -> DeploymentConfig:
        return cls(
            id=row.pk,
            name=row.name,
            version=row.version,
            status=row.status,
            error=row.error,
            kind=row.trained_model.kind,
            project_id=row.project_id or row.trained_model.project_id,
            reward=reward_settings(row),
            max_batch_size=row.max_batch_size,
            max_wait_ms=row.max_wait_ms,
            sample_every=row.sample_every,
            paused=row.paused,
        )

    def check_available(self) -> None:
        if self.paused:
            raise DeploymentPaused(
                f"deployment {self.name!r} is paused: its managers resume it on its page (/deployments/{self.name}/) "
                f"or with POST /api/deployments/{self.name}/resume"
            )
        if self.status == "unhealthy":
            raise DeploymentUnavailable(f"deployment {self.name!r} is unhealthy: {self.error or 'unknown error'}")


def reward_settings(row) -> RewardSettings:
    return RewardSettings(
        reward_mode=row.reward_mode,
        threshold=row.threshold,
        reward_type=row.reward_type,
        success_reward=row.success_reward,
        fail_reward=row.fail_reward,
        env_reward_weight=row.env_reward_weight,
        reward_weight=row.reward_weight,
        history_size=row.history_size,
        min_history_size=row.min_history_size,
        input_interval=row.input_interval,
        interval_reward=row.interval_reward,
        input_on_done=row.input_on_done,
        history_reward_assign=row.history_reward_assign,
        gt_success_bonus=row.gt_success_bonus,
        ood_action=row.ood_action,
    )


_cache_lock = threading.Lock()
# its connection stays open: a refresh a second per deployment would otherwise start a database server process
_refresher = DatabaseThreads("deployment-config", 1)


def _config_load(name: str) -> DeploymentConfig | None:
    from .models import Deployment

    row = Deployment.objects.select_related("trained_model").filter(name=name).first()
    return DeploymentConfig.from_row(row) if row is not None else None


def _config_refresh(name: str) -> DeploymentConfig | None:
    """`_config_load` on the refresher thread (its kept connection, replaced if the server dropped it)."""
    return _refresher.run(_config_load, (name,), retry=True)


_configs: StaleCache[str, DeploymentConfig] = StaleCache(
    _config_refresh, ttl_s=CACHE_TTL_S, max_stale_s=CACHE_STALE_S, background=_refresher.executor.submit
)


async def deployment_config(name: str) -> DeploymentConfig:
    """The deployment's settings from this process's cache (a hit costs no thread hop and no query; see
    CACHE_TTL_S and CACHE_STALE_S). Raises DeploymentNotFound. Sync callers:
    `async_to_sync(deployment_config)(name)`."""
    hit, config = _configs.get(name)
    if not hit:
        config = await orm_call(_config_load, name)
        if config is not None:  # a miss is not kept: a deployment made in another process is found at once
            _configs.put(name, config)
    if config is None:
        raise DeploymentNotFound(f"no deployment named {name!r}")
    return config


def forget_deployment(name: str) -> None:
    """Drop this process's cached settings (after a change made here)."""
    _configs.forget(name)
    with _cache_lock:
        _names.clear()


_names: dict[str, tuple[float, dict[str, str]]] = {}


def _names_load() -> dict[str, str]:
    """Every deployment name and alias (lower case) -> the deployment's name."""
    from .models import Deployment

    table: dict[str, str] = {}
    rows = list(Deployment.objects.values_list("name", "aliases"))
    for name, aliases in rows:
        for alias in aliases or []:
            table.setdefault(str(alias).lower(), name)
    for name, _ in rows:
        table[name.lower()] = name  # a deployment's own name wins over another's alias
    entry = (time.monotonic(), table)
    with _cache_lock:
        _names["all"] = entry
    return table


def deployment_name_for(model: str) -> str:
    """The deployment an OpenAI `model` names: its name or one of its aliases, case-insensitively (RLinf
    names the model by its base model folder, e.g. `Qwen3-VL-4B-Instruct`). Raises DeploymentNotFound.

    The table is cached for CACHE_TTL_S; a name it lacks is looked up again before the answer is "not
    found", so a deployment created in another process is served at once."""
    key = model.strip().lower()
    entry = _names.get("all")
    found = entry[1].get(key) if entry is not None and time.monotonic() - entry[0] < CACHE_TTL_S else None
    if found is None:  # not cached, cached too long ago, or created since: read the table
        found = _names_load().get(key)
    if found is None:
        raise DeploymentNotFound(f"no deployment named {model!r} (nor with that alias)")
    return found


def queue_bounds(*, trusted: bool = False) -> QueueBounds:
    """The queue's bounds; a trusted network's tokenless caller (one RL run's batch of envs from one
    address) may have TRUSTED_CLIENT_QUEUE_MAX requests waiting instead of INFERENCE_CLIENT_QUEUE_MAX."""
    return QueueBounds(
        max_queue=settings.INFERENCE_QUEUE_MAX,
        queue_ttl_s=settings.INFERENCE_QUEUE_TTL_S,
        max_per_client=settings.TRUSTED_CLIENT_QUEUE_MAX if trusted else settings.INFERENCE_CLIENT_QUEUE_MAX,
        max_queue_bytes=settings.INFERENCE_QUEUE_MAX_BYTES,
        max_client_bytes=settings.INFERENCE_CLIENT_QUEUE_MAX_BYTES,
        max_inflight_bytes=settings.INFERENCE_INFLIGHT_MAX_BYTES,
        max_project_inflight_bytes=settings.INFERENCE_PROJECT_INFLIGHT_MAX_BYTES,
    )


TRUSTED_CLIENT_PREFIX = "n"  # a trusted network's tokenless caller: "n<address>" (projects.gate.auth.TrustedClient)


_sync_redis = None
_async_clients: dict[asyncio.AbstractEventLoop, AsyncBrokerClient] = {}


def sync_redis():
    """This process's blocking Redis client for sync reads (worker heartbeats, monitor counters)."""
    global _sync_redis
    if _sync_redis is None:
        _sync_redis = redis_from_url(settings.REDIS_URL, pool=pool_size())
    return _sync_redis


_payload_redis = None


def payload_redis():
    """The blocking client that writes large payloads from threads (one pool per process)."""
    global _payload_redis
    if _payload_redis is None:
        _payload_redis = payload_redis_from_url(settings.REDIS_URL, pool_size())
    return _payload_redis


def abroker() -> AsyncBrokerClient:
    """This event loop's broker client (a web process has one loop; `async_to_sync` outside ASGI makes a
    loop per call, whose client is dropped once that loop is closed)."""
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        for closed in [other for other in _async_clients if other.is_closed()]:
            del _async_clients[closed]
        client = _async_clients[loop] = AsyncBrokerClient(
            redis_from_url(settings.REDIS_URL, asyncio=True, pool=pool_size()),
            queue_bounds(),
            payload_redis(),
            pool_size(),
            load_wait_s=float(settings.INFERENCE_LOAD_WAIT_S),
        )
    return client


def _submit_options(config: DeploymentConfig, timeout: float | None) -> dict:
    return {
        "timeout": timeout or request_timeout_s(),
        "max_batch_size": config.max_batch_size,
        "max_wait_ms": config.max_wait_ms,
    }


class RequestRefused(DeploymentUnavailable):
    """The workers refused what the request holds (broker.RequestRejected): the reward endpoints answer 400."""


async def _timeout_error(exc: InferenceTimeout) -> DeploymentUnavailable:
    """Say whether any worker is alive, so that a missing worker (not worth a retry) is told apart from a busy
    one (DeploymentBusy)."""
    try:
        beats = await abroker().redis.hgetall(WORKERS_KEY)
    except Exception:
        return DeploymentUnavailable(str(exc))
    if not any_worker_alive(beats):
        return DeploymentUnavailable(
            f"{exc}: no inference worker is running; start one with `python manage.py inference_worker`"
        )
    return DeploymentBusy(f"{exc}: the inference workers are busy or cannot load this model")


async def infer_payload(
    config: DeploymentConfig, payload: bytes, *, timeout: float | None = None, client: str = "", shm: dict | None = None
) -> list[Any]:
    """Per-item results for an `.npy` payload already validated by the caller. `client` (e.g. "a12") is
    counted against its share of the deployment's queue (INFERENCE_CLIENT_QUEUE_MAX; TRUSTED_CLIENT_QUEUE_MAX
    for a trusted network's "n<address>"). With `shm` (a checked same-host descriptor's header) the payload
    is empty and the worker reads the frames from the client's segment. Never blocks the event loop; sync callers:
    `async_to_sync(infer_payload)(...)`."""
    config.check_available()
    try:
        options = _submit_options(config, timeout)
        if client.startswith(TRUSTED_CLIENT_PREFIX):
            options["bounds"] = queue_bounds(trusted=True)
        reply = await abroker().submit(
            config.name, config.version, payload, client=client, shm=shm, project=config.project_id, **options
        )
        return reply.unwrap()
    except InferenceTimeout as exc:
        raise await _timeout_error(exc) from None
    except (QueueFull, PoolExhausted, RedisRefused) as exc:
        raise DeploymentBusy(str(exc)) from None
    except RequestRejected as exc:
        raise RequestRefused(str(exc)) from None
    except BrokerError as exc:
        raise DeploymentUnavailable(str(exc)) from None


async def infer(deployment_name: str, images: np.ndarray, *, timeout: float | None = None) -> list[Any]:
    """Per-item model results (probabilities for ResNet) for `images` (first axis = items)."""
    config = await deployment_config(deployment_name)
    return await infer_payload(config, dump_npy(np.asarray(images)), timeout=timeout)
