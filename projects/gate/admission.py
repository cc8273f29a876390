"""Who may go on: the Bearer token's agent, within the bad-request limit and one per-agent limit.

Both ASGI fast paths (rewards, ingest) admit a request the same way before they read its body. An agent
remembered from a recent request (no query, `projects.gate.auth`) costs one Redis round trip for both limits
(`RateLimiter.check_then_hit`); any other token is checked against the bad-request limit before it is
parsed or looked up, then counted against the agent's limit once it is known.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from limits import RateLimitItem

from common.asgi_http import HttpError
from common.db_bridge import orm_call
from projects.auth import MALFORMED, UNKNOWN
from projects.gate.auth import agent_remembered, cached_agent
from projects.gate.limits import Verdict, too_many
from projects.gate.throttles import bad_request_limit, limiter
from projects.tokens import token_from_header


async def admitted_agent(
    authorization: str,
    client: str,
    limit: RateLimitItem | None,
    counter: str,
    refusal: str,
    lookup: Callable[..., Awaitable[Any]] = orm_call,
):
    """The agent behind `authorization`, once the bad-request limit (per `client`, checked first) and
    `limit` (counted per agent under `counter`) allow it. Raises HttpError: 401 for a malformed or unknown
    token, 429 with Retry-After for a limit (`refusal` names the agent's). `lookup` runs a token query that
    misses the cache."""
    token = token_from_header(authorization)
    agent = agent_remembered(token) if token is not None else None
    if agent is not None:
        bad, counted = await limiter().check_then_hit(
            bad_request_limit(), "bad:" + client, limit, f"{counter}:a{agent.pk}"
        )
        _refuse_bad(bad)
        _refuse(counted, refusal)
        return agent
    _refuse_bad(await limiter().check(bad_request_limit(), "bad:" + client))
    if token is None:
        raise HttpError(401, MALFORMED)
    agent = await cached_agent(token, lookup)
    if agent is None:
        raise HttpError(401, UNKNOWN)
    _refuse(await limiter().hit(limit, f"{counter}:a{agent.pk}"), refusal)
    return agent


def _refuse_bad(verdict: Verdict) -> None:
    _refuse(verdict, "too many bad requests from this client; fix them")


def _refuse(verdict: Verdict, what: str) -> None:
    if not verdict.allowed:
        raise HttpError(429, too_many(verdict, what), verdict.retry_after)
