"""ASGI fast path for the hot endpoint: `POST /api/deployments/<name>/rewards` with an `.npy` body.

RL workers call it at every step, and Django's request cycle (a thread per request, the middleware
chain) costs more CPU than the rest of the request together. This wrapper answers exactly those
requests (method POST, that path, `Content-Type: application/x-npy`, a Bearer token) on the event loop
with the same functions the DRF view calls (through `async_to_sync`): cached token lookup, the rate limits (`projects.gate.limits`, async),
header-only `.npy` validation, the reward logic, the same JSON and the same error messages. Everything
else (JSON bodies, sessions, every other URL, WebSockets) goes to the wrapped application unchanged.

webapp/asgi.py puts it in front of Django for every web process.
"""

from __future__ import annotations

import functools
import re
import time
from urllib.parse import parse_qs

from django.conf import settings

from common import metrics
from common.asgi_http import HttpError, read_body, respond_json
from common.body_budget import BodyBudget, BodyHold
from inference import permissions as inference_perms
from inference.wire.payloads import PayloadError, PayloadTooLarge, npy_shape
from projects import access
from projects.gate.admission import admitted_agent
from projects.gate.limits import client_key
from projects.gate.throttles import bad_request_limit, limiter, rewards_limit
from training.families import takes_windows

from .reward_serving import npy_fields, reward_request, rewards_answer
from .serving import DeploymentConfig, DeploymentNotFound, DeploymentUnavailable, deployment_config
from .shm.frames import MEDIA_TYPE as SHM
from .shm.serving import request_descriptor

ROUTE = re.compile(r"^/api/deployments/(?P<name>[-a-zA-Z0-9_]+)/rewards$")
NPY = "application/x-npy"
ENDPOINT = "api/deployments/<slug:name>/rewards"  # the URL pattern's label in rs_http_requests


class RewardsFastPath:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        match = ROUTE.match(scope["path"])
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        authorization = headers.get("authorization", "")
        if match is None or content_type not in (NPY, SHM) or not authorization:
            return await self.app(scope, receive, send)  # DRF answers these (and their errors)
        client = client_key(authorization, (scope.get("client") or ("", 0))[0])
        retry_after = 0
        started = time.perf_counter()
        try:
            status, body = 200, await self._rewards(match["name"], scope, receive, headers, client, content_type)
        except HttpError as exc:
            status, body, retry_after = exc.status, {"detail": exc.detail}, exc.retry_after
            if 400 <= status < 500 and status != 429:
                await limiter().hit(bad_request_limit(), "bad:" + client)
        await respond_json(send, status, body, retry_after)
        deployment = match["name"][:100] if status != 404 else ""
        metrics.observe_request(ENDPOINT, "POST", status, time.perf_counter() - started, deployment)

    async def _rewards(self, name: str, scope, receive, headers: dict, client: str, content_type: str) -> dict:
        agent = await admitted_agent(
            headers["authorization"], client, rewards_limit(), "rewards", "reward rate limit reached for this token"
        )
        refused = access.scope_refusal(agent, inference_perms.REWARDS)
        if refused is not None:
            raise HttpError(403, refused)
        with web_bodies().hold() as hold:  # given back once the answer is sent: the body is kept until then
            payload = await _read_body(receive, headers, hold)
            return await self._answer(name, agent, payload, scope, headers, content_type)

    async def _answer(self, name: str, agent, payload: bytes, scope, headers: dict, content_type: str) -> dict:
        try:
            config = await deployment_config(name)
        except DeploymentNotFound as exc:
            raise HttpError(404, str(exc)) from None
        allowed = _access(agent, config)
        if allowed == 404:
            raise HttpError(404, f"no deployment named {name!r}")
        if allowed != 200:
            raise HttpError(403, access.refusal(agent, inference_perms.REWARDS))
        if takes_windows(config.kind):
            raise HttpError(
                400,
                f"deployment {name!r} serves a VLM trend model: send windows to /api/deployments/{name}/vlm/rewards",
            )
        query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
        try:
            if content_type == SHM:  # same-host frames: a descriptor of the client's segment, checked here
                shm = request_descriptor(payload, f"a{agent.pk}")
                payload, shape = b"", shm.shape
            else:
                shm = None
                shape = npy_shape(
                    payload, max_side=settings.MAX_IMAGE_SIDE, max_request_pixels=settings.MAX_REQUEST_PIXELS
                )
            request = reward_request(payload, shape[0], npy_fields(query, headers), client=f"a{agent.pk}")
            request.shm = shm
        except PayloadTooLarge as exc:
            raise HttpError(413, str(exc)) from None
        except PayloadError as exc:
            raise HttpError(400, str(exc)) from None
        try:
            return await rewards_answer(config, request)
        except DeploymentUnavailable as exc:  # a busy one (DeploymentBusy) carries Retry-After
            raise HttpError(503, str(exc), getattr(exc, "retry_after_s", 0)) from None


_verdicts: dict[tuple[int, int], tuple[object, DeploymentConfig, int]] = {}


def _access(agent, config: DeploymentConfig) -> int:
    """`access.check(agent, REWARDS, config)`, remembered for these two objects: the agent (its grants are
    loaded with the token) and the settings are replaced when their caches refresh, so a verdict lives no
    longer than they do, and the rules are not evaluated again for every request."""
    key = (id(agent), id(config))
    found = _verdicts.get(key)
    if found is not None and found[0] is agent and found[1] is config:
        return found[2]
    allowed = access.check(agent, inference_perms.REWARDS, config)
    if len(_verdicts) >= 1000:
        _verdicts.clear()
    _verdicts[key] = (agent, config, allowed)
    return allowed


async def _read_body(receive, headers: dict, hold: BodyHold) -> bytes:
    # The largest valid body: MAX_REQUEST_PIXELS RGB bytes plus a generous .npy header.
    limit = min(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, settings.MAX_REQUEST_PIXELS * 3 + 65536)
    declared = headers.get("content-length", "")
    what = "MAX_REQUEST_PIXELS x 3 plus the header, DATA_UPLOAD_MAX_MEMORY_SIZE"
    return await read_body(receive, limit, what, hold, int(declared) if declared.isdigit() else 0)


@functools.cache
def web_bodies() -> BodyBudget:
    """This web process's budget for the reward bodies it holds (WEB_BODIES_MAX_BYTES)."""
    return BodyBudget(settings.WEB_BODIES_MAX_BYTES, "WEB_BODIES_MAX_BYTES")
