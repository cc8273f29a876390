"""RewardClient: rewards from a Reward Studio deployment over HTTP, for RL workers.

Needs only numpy, requests and urllib3 (no Django, no torch).

    from reward_client import RewardClient
    client = RewardClient("http://studio:8000", token, deployment="pick-cube")
    result = client.compute_rewards(images, env_rewards=env_r, dones=dones)   # images: uint8 [B,H,W,3]
    result.rewards, result.probabilities, result.success

`RewardClient("http://studio:8000/api/deployments/pick-cube", token)` works too; `token=None` sends no
Authorization header (from a network the server trusts, `TRUSTED_CIDRS`). Errors are RewardServiceError
subclasses (reward_client.errors) carrying the HTTP status and the server's message; connection errors and
timeouts are retried with backoff first.

`compute_rewards`, the RL loop's hot path, sends through a urllib3 connection pool (kept-alive connections,
a fraction of a requests.Session's CPU per call); `call()` (any other endpoint) goes through requests. A
client given `session=` (a requests.Session), or one whose URL the environment sends through a proxy, or one
the server redirects, sends everything through requests.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

import numpy as np
import requests
import urllib3
from urllib3 import exceptions as urllib3_errors

from .arrays import flat, uint8_batch
from .errors import ConnectionFailed, error_for

__all__ = ["RewardClient", "RewardResult"]


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


_Response = TypeVar("_Response")
_DEPLOYMENT_URL = re.compile(r"^(?P<base>.*?)/api/deployments/(?P<name>[-\w]+)/?$")


class RewardClient:
    def __init__(
        self,
        base_url: str,
        token: str | None,
        deployment: str | None = None,
        *,
        timeout: float = 130.0,  # above the service's INFERENCE_TIMEOUT_S (120): its 503 comes first
        retries: int = 3,
        backoff_s: float = 0.5,
        session: requests.Session | None = None,
    ) -> None:
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
        self._pool = (
            None if session is not None or requests.utils.get_environ_proxies(base_url) else _pool_for(base_url)
        )
        self._path_prefix = urlsplit(base_url).path

    def __getstate__(self) -> dict[str, Any]:
        """Picklable, as with a requests.Session alone (Ray ships reward models to its workers): the pool's
        sockets stay behind and the copy opens its own."""
        return {**self.__dict__, "_pool": self._pool is not None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pool = _pool_for(self.base_url) if state["_pool"] else None

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
        array = uint8_batch(images)
        params: dict[str, str] = {}
        if env_rewards is not None:
            params["env_rewards"] = ",".join(map(repr, flat(env_rewards, np.float64)))
        if dones is not None:
            params["dones"] = ",".join("1" if v else "0" for v in flat(dones))
        if env_success is not None:
            params["env_success"] = ",".join("1" if v else "0" for v in flat(env_success))
        if stream:
            params["stream"] = stream
        if episode_ids is not None:
            params["episode_ids"] = ",".join(map(str, flat(episode_ids)))
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

    def _post(self, body: bytes, params: dict[str, str]) -> Any:
        """The rewards request: through the urllib3 pool, or requests where this client has no pool."""
        if self._pool is None:
            return self.call(
                "POST",
                self.rewards_url,
                data=body,
                params=params,
                headers={"Content-Type": "application/x-npy"},
            )
        path = f"{self._path_prefix}/api/deployments/{self.deployment}/rewards"
        if params:
            path += "?" + urlencode(params)
        headers = {"Content-Type": "application/x-npy"}
        authorization = self.session.headers.get("Authorization")
        if authorization:
            headers["Authorization"] = authorization
        pool = self._pool
        response = self._retrying(
            lambda: pool.urlopen(
                "POST", path, body=body, headers=headers, retries=False, redirect=False, timeout=self.timeout
            ),
            self.rewards_url,
            _URLLIB3_TRANSPORT_ERRORS,
        )
        if 300 <= response.status < 400:  # a redirect: requests follows it as a browser would, from now on
            self._pool = None
            return self._post(body, params)
        if 200 <= response.status < 300:
            return json.loads(response.data) if response.data else {}
        raise error_for(response.status, response.data, response.reason)

    def call(self, method: str, url: str, **kwargs: Any) -> Any:
        """Any request to the service (a path or a full URL), retried on connection errors; the JSON answer,
        or a RewardServiceError for an HTTP error."""
        if url.startswith("/"):
            url = self.base_url + url
        timeout = kwargs.pop("timeout", self.timeout)
        response = self._retrying(
            lambda: self.session.request(method, url, timeout=timeout, **kwargs),
            url,
            (requests.ConnectionError, requests.Timeout),
        )
        if 200 <= response.status_code < 300:
            return response.json() if response.content else {}
        raise error_for(response.status_code, response.content, response.reason)

    def _retrying(self, send: Callable[[], _Response], url: str, errors: tuple[type[Exception], ...]) -> _Response:
        """send()'s answer; connection errors and timeouts retried `retries` times with exponential backoff."""
        attempt = 0
        while True:
            try:
                return send()
            except errors as exc:
                attempt += 1
                if attempt > self.retries:
                    raise ConnectionFailed(f"cannot reach {url} after {attempt} tries: {exc}") from exc
                time.sleep(self.backoff_s * 2 ** (attempt - 1))


# What requests raises as ConnectionError or Timeout, as urllib3 raises it with retries=False.
_URLLIB3_TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    urllib3_errors.TimeoutError,  # connect and read timeouts, refused connections, unknown host names
    urllib3_errors.ProtocolError,  # connection reset or closed mid-answer
    urllib3_errors.SSLError,
    urllib3_errors.ProxyError,
    urllib3_errors.ClosedPoolError,
)


def _pool_for(base_url: str) -> urllib3.HTTPConnectionPool:
    """Kept-alive connections to the server, up to 10 kept (as requests keeps), with requests' CA bundle."""
    options: dict[str, Any] = {"maxsize": 10, "block": False, "retries": False}
    if base_url.startswith("https:"):
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or requests.certs.where()
        options["ca_cert_dir" if os.path.isdir(bundle) else "ca_certs"] = bundle
    return urllib3.connection_from_url(base_url, **options)
