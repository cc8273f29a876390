"""Token authentication for the rewards endpoint without a database query per request.

RL workers call the endpoint at every step; looking the token up in the database each time would cost
more than the rest of the request (a fresh connection under ASGI). Agents found by token are kept in
process memory for TOKEN_CACHE_S, so a revoked token stops working within that time. Unknown tokens
are never cached (the bad-request limiter bounds how often they are looked up).

`TrustedNetworkAuthentication` lets tokenless requests from `TRUSTED_CIDRS` through (RLinf's API reward
worker sends no token); the address check itself is `common.trusted_networks`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, SessionAuthentication

from common.db_bridge import orm_call
from projects.auth import AgentTokenAuthentication, agent_for_token
from projects.tokens import hash_token

TOKEN_CACHE_S = 10.0
_agents: dict[str, tuple[float, object]] = {}
_lock = threading.Lock()


def agent_remembered(token: str):
    """The agent owning `token` if it was looked up within TOKEN_CACHE_S (memory only, no query); else None."""
    return _cached(token)


def _cached(token: str):
    entry = _agents.get(hash_token(token))
    if entry is not None and time.monotonic() - entry[0] < TOKEN_CACHE_S:
        return entry[1]
    return None


def _remember(token: str, agent) -> None:
    with _lock:
        if len(_agents) > 10_000:
            _agents.clear()
        _agents[hash_token(token)] = (time.monotonic(), agent)


async def cached_agent(token: str, call: Callable[..., Awaitable[Any]] = orm_call):
    """The active agent owning `token` (None if unknown), from memory when looked up recently.

    Async (the fast paths await it); DRF's authentication calls it through `async_to_sync`. `call` runs the
    lookup: `orm_call` (a fresh connection each time), or the caller's own threads that keep theirs (the
    ingest fast path's writers)."""
    agent = _cached(token)
    if agent is None:
        agent = await call(agent_for_token, token)
        if agent is not None:
            _remember(token, agent)
    return agent


class CachedAgentTokenAuthentication(AgentTokenAuthentication):
    """Agent tokens, with the agents of recent tokens remembered (no query per request)."""

    def agent_for(self, token: str):
        return async_to_sync(cached_agent)(token)


def forget_tokens() -> None:
    with _lock:
        _agents.clear()


class TrustedClient:
    """Who a tokenless request from a trusted network is (see common.trusted_networks)."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    token_hash = None
    trusted_network = True  # projects.access: may see deployments and ask them for rewards

    def __init__(self, address: str):
        self.address = address
        self.pk = f"net:{address}"
        self.client_id = f"n{address}"

    def __str__(self) -> str:
        return f"trusted network client {self.address}"


def client_id(user) -> str:
    """Whom a request counts against (queue shares, rate limits, history streams): "a<id>" for an agent
    token, "n<address>" for a trusted network's tokenless caller, "u<id>" for a person."""
    if getattr(user, "token_hash", None):
        return f"a{user.pk}"
    if getattr(user, "trusted_network", False):
        return f"n{user.address}"
    return f"u{user.pk}"


class TrustedNetworkAuthentication(BaseAuthentication):
    """DRF authentication for requests WITHOUT an Authorization header from `settings.TRUSTED_CIDRS`.

    Put it after the token authentication: a request that carries a token is judged by its token."""

    def authenticate(self, request):
        from django.conf import settings

        from common.trusted_networks import address_trusted, networks_cached

        if request.META.get("HTTP_AUTHORIZATION"):
            return None
        address = request.META.get("REMOTE_ADDR", "")
        if address_trusted(address, networks_cached(tuple(getattr(settings, "TRUSTED_CIDRS", None) or ()))):
            return TrustedClient(address), None
        return None

    def authenticate_header(self, request):
        return "Bearer"


class TrustedNetworkScheme(OpenApiAuthenticationExtension):
    """In the OpenAPI schema: the agent token becomes optional (trusted networks need none)."""

    target_class = "projects.gate.auth.TrustedNetworkAuthentication"
    name = "TrustedNetwork"

    def get_security_requirement(self, auto_schema):
        return {}  # no credentials at all

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "None needed from networks in TRUSTED_CIDRS."}


# The deployments' reward and chat endpoints and `/health` (exactly what the TRUSTED_CIDRS row of docs/operations.md lists): a
# token, else a logged-in person (judged as themselves: a person who is no member of the deployment's project
# does not become a trusted client by calling from a trusted network), else a trusted network. The hot rewards
# endpoint caches tokens (REWARDS_AUTHENTICATION).
DEPLOYMENT_AUTHENTICATION: list[type[BaseAuthentication]] = [
    AgentTokenAuthentication,
    SessionAuthentication,
    TrustedNetworkAuthentication,
]
REWARDS_AUTHENTICATION = [CachedAgentTokenAuthentication, SessionAuthentication, TrustedNetworkAuthentication]
# A deployment's monitor and health data (names, errors, rates): a token or a person, never a bare address.
MONITOR_AUTHENTICATION: list[type[BaseAuthentication]] = [CachedAgentTokenAuthentication, SessionAuthentication]
