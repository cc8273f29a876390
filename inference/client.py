"""Python client for RL workers: rewards from a Reward Studio deployment over HTTP.

Needs only numpy and requests (no Django, no torch); copy this file into an RL code base if you like.

    from inference.client import RewardClient
    client = RewardClient("http://studio:8000", token, deployment="pick-cube")
    result = client.compute_rewards(images, env_rewards=env_r, dones=dones)   # images: uint8 [B,H,W,3]
    result.rewards, result.probabilities, result.success

`RewardClient("http://studio:8000/api/deployments/pick-cube", token)` works too; `token=None` sends no
Authorization header (from a network the server trusts, `TRUSTED_CIDRS`). The RLinf and DI-engine
adapters (`inference/rl_adapters.py`, also importable from here) give the shapes their registries build. Errors are RewardServiceError subclasses carrying the
HTTP status and the server's message; connection errors are retried with backoff first.
"""

from __future__ import annotations

import io
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import requests

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "ConnectionFailed",
    "NotFoundError",
    "RewardClient",
    "RewardResult",
    "RewardServiceError",
    "ServiceUnavailable",
]


class RewardServiceError(Exception):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message if status is None else f"HTTP {status}: {message}")
        self.status = status
        self.detail = message


class AuthenticationError(RewardServiceError):
    """401/403: missing, unknown or revoked token."""


class BadRequestError(RewardServiceError):
    """400/413/415/429: the request itself is wrong (dtype, shape, flags...)."""


class NotFoundError(RewardServiceError):
    """404: no deployment with that name."""


class ServiceUnavailable(RewardServiceError):
    """503: the deployment is unhealthy or no inference worker answered."""


class ConnectionFailed(RewardServiceError):
    """The server could not be reached, even after retries."""


@dataclass
class RewardResult:
    rewards: np.ndarray  # float32 [B]
    probabilities: np.ndarray  # float32 [B], NaN where the reward mode did not score the item
    success: np.ndarray  # bool [B], False where not scored
    scored: np.ndarray  # bool [B]
    version: int = 0
    model_outputs: np.ndarray | None = None  # float32 [B]: the model's part before the combine weights
    items: list | None = None  # the raw items (window, assign_previous, assign_reward, ...)

    def __len__(self) -> int:
        return len(self.rewards)


_DEPLOYMENT_URL = re.compile(r"^(?P<base>.*?)/api/deployments/(?P<name>[-\w]+)/?$")


class RewardClient:
    def __init__(
        self,
        base_url: str,
        token: str | None,
        deployment: str | None = None,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        session: requests.Session | None = None,
    ):
        base_url = base_url.rstrip("/")
        match = _DEPLOYMENT_URL.match(base_url)
        if deployment is None:
            if match is None:
                raise ValueError(
                    "name the deployment: RewardClient(base_url, token, deployment=...) or a .../api/deployments/<name> URL"
                )
            base_url, deployment = match["base"], match["name"]
        self.base_url = base_url
        self.deployment = deployment
        self.timeout = timeout
        self.retries = retries
        self.backoff_s = backoff_s
        self.session = session or requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    @property
    def rewards_url(self) -> str:
        return f"{self.base_url}/api/deployments/{self.deployment}/rewards"

    def compute_rewards(
        self,
        images: Any,
        env_rewards: Any = None,
        dones: Any = None,
        *,
        stream: str | None = None,
        env_success: Any = None,
        episode_ids: Any = None,
    ) -> RewardResult:
        """Rewards for a batch of uint8 [B,H,W,3] images (a single [H,W,3] image is a batch of one).

        `env_success` (the env's own success flag per image) and `episode_ids` (the RL episode of each
        image) are optional; with them the deployment's reward-hacking monitor compares model and env."""
        array = _as_uint8_batch(images)
        params: dict[str, str] = {}
        if env_rewards is not None:
            params["env_rewards"] = ",".join(repr(float(v)) for v in np.asarray(_numpy(env_rewards)).reshape(-1))
        if dones is not None:
            params["dones"] = ",".join("1" if bool(v) else "0" for v in np.asarray(_numpy(dones)).reshape(-1))
        if env_success is not None:
            params["env_success"] = ",".join(
                "1" if bool(v) else "0" for v in np.asarray(_numpy(env_success)).reshape(-1)
            )
        if stream:
            params["stream"] = stream
        if episode_ids is not None:
            params["episode_ids"] = ",".join(str(v) for v in np.asarray(_numpy(episode_ids)).reshape(-1))
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        data = self._post(buffer.getvalue(), params)
        items = data["items"]
        return RewardResult(
            rewards=np.array([i["reward"] for i in items], dtype=np.float32),
            probabilities=np.array(
                [np.nan if i["probability"] is None else i["probability"] for i in items], dtype=np.float32
            ),
            success=np.array([bool(i["success"]) for i in items], dtype=bool),
            scored=np.array([bool(i["scored"]) for i in items], dtype=bool),
            version=int(data.get("version", 0)),
            model_outputs=np.array([i.get("model_output", np.nan) for i in items], dtype=np.float32),
            items=items,
        )

    def _post(self, body: bytes, params: dict[str, str]) -> dict:
        return self.call(
            "POST", self.rewards_url, data=body, params=params, headers={"Content-Type": "application/x-npy"}
        )

    def call(self, method: str, url: str, **kwargs) -> Any:
        """Any request to the service (a path or a full URL), retried on connection errors; the JSON answer,
        or a RewardServiceError for an HTTP error."""
        if url.startswith("/"):
            url = self.base_url + url
        attempt = 0
        while True:
            try:
                response = self.session.request(method, url, timeout=kwargs.pop("timeout", self.timeout), **kwargs)
                break
            except (requests.ConnectionError, requests.Timeout) as exc:
                attempt += 1
                if attempt > self.retries:
                    raise ConnectionFailed(f"cannot reach {url} after {attempt} tries: {exc}") from exc
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
        if 200 <= response.status_code < 300:
            return response.json() if response.content else {}
        raise _error_for(response)


def _error_for(response: requests.Response) -> RewardServiceError:
    try:
        body = response.json()
        detail = body.get("detail") or (body.get("error") or {}).get("message") or body
        detail = str(detail)
    except (ValueError, AttributeError):
        detail = response.text[:500] or response.reason
    status = response.status_code
    if status in (401, 403):
        return AuthenticationError(detail, status)
    if status == 404:
        return NotFoundError(detail, status)
    if status == 503:
        return ServiceUnavailable(detail, status)
    if 400 <= status < 500:
        return BadRequestError(detail, status)
    return RewardServiceError(detail, status)


def _numpy(value: Any) -> Any:
    """Tensors (torch or anything with .numpy()) to numpy without importing torch."""
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "cpu"):
        value = value.cpu()
    if hasattr(value, "numpy"):
        return value.numpy()
    return value


def _as_uint8_batch(images: Any) -> np.ndarray:
    array = np.asarray(_numpy(images))
    if array.ndim == 3:
        array = array[None]
    if array.ndim == 4 and array.shape[-1] != 3 and array.shape[1] == 3:  # NCHW -> NHWC
        array = array.transpose(0, 2, 3, 1)
    if array.dtype != np.uint8:
        raise ValueError(f"images must be uint8 [B,H,W,3], got {array.dtype}")
    if array.ndim != 4 or array.shape[-1] != 3:
        raise ValueError(f"images must be uint8 [B,H,W,3], got shape {list(array.shape)}")
    return np.ascontiguousarray(array)


def _like_input(values: np.ndarray, template: Any) -> Any:
    """A torch tensor when the caller passed one (torch is then already imported), else numpy."""
    if hasattr(template, "detach") and "torch" in sys.modules:
        return sys.modules["torch"].from_numpy(values)
    return values


_ADAPTERS = ("RLinfRewardModel", "RLinfHistoryRewardModel", "DIEngineRewardModel")


def __getattr__(name: str) -> Any:
    """The adapters live in inference/rl_adapters.py; importing them from here keeps working."""
    if name in _ADAPTERS:
        from inference import rl_adapters

        return getattr(rl_adapters, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
