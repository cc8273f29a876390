"""Authentication of agents and RL workers by API token, for DRF views and Channels consumers."""

from __future__ import annotations

from channels.db import database_sync_to_async
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from .tokens import hash_token, token_from_header


def agent_for_token(token: str):
    """The active agent owning `token`, with its project and deployment grants loaded (async callers
    check them without the database)."""
    from .access import agent_grants
    from .models import Agent

    agent = Agent.objects.filter(token_hash=hash_token(token)).first()
    if agent is None or not agent.is_active:
        return None
    agent_grants(agent)
    now = timezone.now()
    if agent.last_seen_at is None or (now - agent.last_seen_at).total_seconds() > 60:
        Agent.objects.filter(pk=agent.pk).update(last_seen_at=now)
    return agent


MALFORMED = "Malformed Authorization header: use 'Bearer <token>'."
UNKNOWN = "Unknown or revoked agent token."


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>`; request.user is then the Agent."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        if not header:
            return None
        token = token_from_header(header)
        if token is None:
            raise exceptions.AuthenticationFailed(MALFORMED)
        agent = self.agent_for(token)
        if agent is None:
            raise exceptions.AuthenticationFailed(UNKNOWN)
        return agent, token

    def agent_for(self, token: str):
        """The agent of `token`, or None (a subclass may remember agents: `projects.gate.auth`)."""
        return agent_for_token(token)

    def authenticate_header(self, request):
        return self.keyword


class AgentTokenMiddleware:
    """Channels middleware: puts `scope["agent"]` from a Bearer header. Tokens in the URL (`?token=`) are
    not read: URLs end up in access logs and proxies' logs."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        token = None
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                token = token_from_header(value.decode("latin-1"))
        scope = dict(scope)
        scope["agent"] = await database_sync_to_async(agent_for_token)(token) if token else None
        return await self.inner(scope, receive, send)


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """Documents agent tokens in the OpenAPI schema: `Authorization: Bearer <token>`."""

    target_class = "projects.auth.AgentTokenAuthentication"
    match_subclasses = True
    name = "AgentToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "An agent's API token (Agents in the admin, or `manage.py create_agent`). Each token names its "
                "scopes and the projects and deployments it may touch (or all of them):\n\n"
                "- `ingest`: create episodes in its projects, append steps to and finish its own episodes\n"
                "- `rewards`: rewards and chat completions from its deployments (or its projects' deployments)\n"
                "- `teleop`: stream live teleop sessions into its projects\n"
                "- `labels`: read labels, write labels (also people's), generate and decide proposals\n"
                "- `training`: snapshots, training jobs (create, cancel, retry, delete), curves, evaluations\n\n"
                "A missing scope answers 403; a project or deployment the token does not name answers 404."
            ),
        }
