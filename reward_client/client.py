"""RewardClient: rewards from a Reward Studio deployment over HTTP, for RL workers.

Needs only numpy, requests and urllib3 (no Django, no torch).

    from reward_client import RewardClient
    client = RewardClient("http://studio:8000", token, deployment="pick-cube")
    result = client.compute_rewards(images, env_rewards=env_r, dones=dones)   # images: uint8 [B,H,W,3]
    result.rewards, result.probabilities, result.success

`RewardClient("http://studio:8000/api/deployments/pick-cube", token)` works too; `token=None` sends no
Authorization header (from a network the server trusts, `TRUSTED_CIDRS`). Errors are RewardServiceError
subclasses (reward_client.errors) carrying the HTTP status and the server's message; connection errors and
timeouts are retried with backoff first (`retries`, `backoff_s`), and so is a 502 (a proxy in front lost the web
process mid-request): a reward call is idempotent, so a request a crashed web process took down is sent again.

Busy: a 503 that carries `Retry-After` (the service's queue is full, every Redis connection is in use, or its
live workers did not answer in time) is retried, waiting the longer of `Retry-After` and an exponential backoff
(`backoff_s`, doubling, at most `busy_backoff_max_s`, times a random 1-1.25 so that many clients spread out),
up to `busy_retries` more tries and no retry starting later than `busy_retry_max_s` after the first try; then
ServiceBusy. Every other error (any other 503, 4xx, 5xx) is raised at once. `busy_retries=0` turns it off.

Same host: when the server runs on this machine (its `GET /api/shm` tells the same boot id and an inference
worker here), `compute_rewards` writes the batch into a shared-memory segment (reward_client.shm) and sends a
descriptor of it instead of the pixels; `frames_buffer(shape)` gives that memory out to write frames into in
place. `transport="auto"` (the default) does so when it can and otherwise, or after the server refuses the
segment, uses HTTP; `"http"` never tries; `"shm"` raises when it cannot. `client.transport_used` says which.
The segment holds one batch at a time: calls from other threads meanwhile go over HTTP ("shm": they wait).

`compute_rewards`, the RL loop's hot path, sends through a urllib3 connection pool (kept-alive connections,
a fraction of a requests.Session's CPU per call); `call()` (any other endpoint) goes through requests. A
client given `session=` (a requests.Session), or one whose URL the environment sends through a proxy, or one
the server redirects, sends everything through requests.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import threading
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
from .errors import (
    BadRequestError,
    ConnectionFailed,
    RewardServiceError,
    ServiceBusy,
    ServiceUnavailable,
    error_for,
    is_busy,
    retry_after_s,
)
from .shm import SharedFrames, local_boot_id, shm_supported

try:  # the answers' JSON: orjson where the RL worker's environment has it (about a third of json's time per item)
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - the client depends on numpy, requests and urllib3 only
    from json import loads as _loads  # type: ignore[assignment]

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
TRANSPORTS = ("auto", "http", "shm")
SEGMENT_UNUSABLE = "shared memory: "  # the server's messages about a segment it cannot use (then: HTTP)
NPY = "application/x-npy"
LOST_STATUSES = frozenset({502})  # a proxy's answer when the web process behind it died mid-request
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
        transport: str = "auto",
        busy_retries: int = 8,
        busy_retry_max_s: float = 600.0,
        busy_backoff_max_s: float = 30.0,
    ) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        if busy_retries < 0 or busy_retry_max_s < 0 or busy_backoff_max_s < 0:
            raise ValueError(
                "busy_retries, busy_retry_max_s and busy_backoff_max_s must be >= 0, got "
                f"{busy_retries}, {busy_retry_max_s}, {busy_backoff_max_s}"
            )
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
        self.busy_retries = busy_retries
        self.busy_retry_max_s = busy_retry_max_s
        self.busy_backoff_max_s = busy_backoff_max_s
        self.busy_retried = 0  # busy 503s this client retried, all calls together
        self.lost_retried = 0  # requests sent again after a connection error, a timeout or a 502
        self.session = session or requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self._pool = (
            None if session is not None or requests.utils.get_environ_proxies(base_url) else _pool_for(base_url)
        )
        self._path_prefix = urlsplit(base_url).path
        self.transport = transport
        self.transport_used = "http" if transport == "http" else ""  # "" until the first request decides
        self.shm_reason = "transport='http'" if transport == "http" else ""  # why HTTP carries the frames
        self._shm: SharedFrames | None = None
        self._shm_media = ""
        self._shm_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """Picklable, as with a requests.Session alone (Ray ships reward models to its workers): the pool's
        sockets and the shared-memory segment stay behind and the copy opens its own."""
        state = {**self.__dict__, "_pool": self._pool is not None, "_shm": None, "_shm_lock": None}
        state["transport_used"] = "http" if self.transport == "http" else ""
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pool = _pool_for(self.base_url) if state["_pool"] else None
        self._shm_lock = threading.Lock()

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
        data = self._send(array, params)
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

    def frames_buffer(self, shape: Any) -> np.ndarray:
        """A writable uint8 array of `shape` ([B,H,W,3]) in the shared-memory segment when the same-host path
        is on (frames written there are sent with no copy by `compute_rewards(buffer)`), else a plain array."""
        shape = tuple(int(v) for v in shape)
        if self._shm_ready():
            assert self._shm is not None
            return self._shm.view(shape)
        return np.empty(shape, dtype=np.uint8)

    def _send(self, array: np.ndarray, params: dict[str, str]) -> Any:
        """The rewards answer for a batch: through shared memory when it is on, else (or when the server
        refuses the segment, transport "auto") as an `.npy` body."""
        if self._shm_ready() and self._shm_lock.acquire(blocking=self.transport == "shm"):
            try:  # one batch at a time in the segment: another thread's call meanwhile goes over HTTP
                assert self._shm is not None
                body = json.dumps(self._shm.write(array)).encode()
                return self._post(body, params, self._shm_media)
            except (BadRequestError, ServiceUnavailable) as exc:
                if self.transport == "shm" or SEGMENT_UNUSABLE not in exc.detail:
                    raise
                self._shm_off(f"the server could not use the segment: {exc.detail}")
            finally:
                self._shm_lock.release()
        return self._post(_npy(array), params)

    def _shm_ready(self) -> bool:
        """Whether the same-host path is on: decided once per client (one `GET /api/shm`)."""
        if self.transport_used:
            return self.transport_used == "shm"
        with self._shm_lock:  # threads asking at once: one decides, and makes the one segment
            if not self.transport_used:
                reason = self._shm_check()
                if reason and self.transport == "shm":
                    raise RewardServiceError(f"transport='shm' is not possible: {reason}")
                if reason:
                    self._shm_off(reason)
                else:
                    self.transport_used = "shm"
        return self.transport_used == "shm"

    def _shm_check(self) -> str:
        """Why the same-host path cannot be used ("" when it can); makes the segment when it can."""
        if not shm_supported():
            return "this machine has no memfd shared memory (Linux only)"
        try:
            info = self.call("GET", "/api/shm")
        except RewardServiceError as exc:
            return f"GET /api/shm: {exc}"
        if not info.get("enabled"):
            return "the server has the same-host path off (SHM_ENABLED=0)"
        if not info.get("boot_id") or info.get("boot_id") != local_boot_id():
            return "the server runs on another machine (another boot id)"
        if not info.get("workers_here"):
            return "no inference worker runs on the server's machine"
        self._shm, self._shm_media = SharedFrames(str(info["key"])), str(info["media_type"])
        return ""

    def _shm_off(self, reason: str) -> None:
        self.transport_used, self.shm_reason = "http", reason
        if self._shm is not None:
            self._shm.close()
            self._shm = None

    def close(self) -> None:
        """Give back the shared-memory segment (the process's end does too) and the kept-alive connections."""
        if self._shm is not None:
            self._shm.close()
            self._shm = None
        if self.transport_used == "shm":
            self.transport_used = ""
        if self._pool is not None:
            self._pool.close()

    def _post(self, body: bytes, params: dict[str, str], content_type: str = NPY) -> Any:
        """The rewards request: through the urllib3 pool, or requests where this client has no pool."""
        if self._pool is None:
            return self.call(
                "POST",
                self.rewards_url,
                data=body,
                params=params,
                headers={"Content-Type": content_type},
            )
        path = f"{self._path_prefix}/api/deployments/{self.deployment}/rewards"
        if params:
            path += "?" + urlencode(params)
        headers = {"Content-Type": content_type}
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
            lambda r: (r.status, r.headers),
        )
        if 300 <= response.status < 400:  # a redirect: requests follows it as a browser would, from now on
            self._pool = None
            return self._post(body, params, content_type)
        if 200 <= response.status < 300:
            return _loads(response.data) if response.data else {}
        raise error_for(response.status, response.data, response.reason, response.headers)

    def call(self, method: str, url: str, **kwargs: Any) -> Any:
        """Any request to the service (a path or a full URL), retried on connection errors and busy 503s; the
        JSON answer, or a RewardServiceError for an HTTP error."""
        if url.startswith("/"):
            url = self.base_url + url
        timeout = kwargs.pop("timeout", self.timeout)
        response = self._retrying(
            lambda: self.session.request(method, url, timeout=timeout, **kwargs),
            url,
            (requests.ConnectionError, requests.Timeout),
            lambda r: (r.status_code, r.headers),
        )
        if 200 <= response.status_code < 300:
            return response.json() if response.content else {}
        raise error_for(response.status_code, response.content, response.reason, response.headers)

    def _retrying(
        self,
        send: Callable[[], _Response],
        url: str,
        errors: tuple[type[Exception], ...],
        status_of: Callable[[_Response], tuple[int, Any]],
    ) -> _Response:
        """send()'s answer; connection errors, timeouts and 502s retried `retries` times with exponential
        backoff, busy 503s (with `Retry-After`) as the module says. The answer of the last try is returned as it is
        (the caller raises its error), except a busy 503 given up on: ServiceBusy, saying how long it tried."""
        started = time.monotonic()
        failures = busy = 0
        while True:
            try:
                response = send()
            except errors as exc:
                failures += 1
                if failures > self.retries:
                    raise ConnectionFailed(f"cannot reach {url} after {failures} tries: {exc}") from exc
                self.lost_retried += 1
                time.sleep(self.backoff_s * 2 ** (failures - 1))
                continue
            status, headers = status_of(response)
            if status in LOST_STATUSES and failures < self.retries:
                failures += 1
                self.lost_retried += 1
                time.sleep(self.backoff_s * 2 ** (failures - 1))
                continue
            if not is_busy(status, headers) or self.busy_retries == 0:
                return response
            asked = retry_after_s(headers) or 0.0
            busy += 1
            backoff = min(self.backoff_s * 2 ** (busy - 1), self.busy_backoff_max_s)
            delay = max(asked, backoff) * random.uniform(1.0, 1.25)
            waited = time.monotonic() - started
            if busy > self.busy_retries or waited + delay > self.busy_retry_max_s:
                error = error_for(status, _content(response), getattr(response, "reason", ""), headers)
                tried = f"{busy} tries in {waited:.1f} s"
                limits = f"busy_retries={self.busy_retries}, busy_retry_max_s={self.busy_retry_max_s:g}"
                raise ServiceBusy(f"{error.detail} (still busy after {tried}; {limits})", status, asked) from None
            self.busy_retried += 1
            time.sleep(delay)


def _content(response: Any) -> bytes:
    """The body of a urllib3 or a requests answer."""
    data = getattr(response, "data", None)
    return data if isinstance(data, bytes) else bytes(getattr(response, "content", b"") or b"")


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


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
