"""Who may do what: project roles for people, scopes for agent tokens, site admins above all projects.

One place decides it. A caller (an "actor") is whatever authenticated the request: a User (session), an
Agent (token) or an AnonymousUser; `actor_of(request)` is where another kind of caller is recognised:
a tokenless request from a trusted network (projects.gate.auth.TrustedClient) may see deployments and ask
them for rewards, nothing else. Permissions are `rules` predicates registered under
their names by the apps' `permissions` modules (`project_perm`, `deployment_perm`); views call `require(...)` with
one of them and an object:

- a project the caller cannot see at all answers 404 (no data and no hint that it exists);
- a project it can see but where its role or token scope is too small answers 403 naming what is missing.

People: annotator < reviewer < manager per project (projects.Membership); superusers are site admins.
Agents: each permission needs one token scope, and the object must be one of the token's projects or
deployments (or `all_projects`). Role lookups are cached on the actor object for the request; an agent's
project and deployment ids are cached on the Agent object (token caches keep it for seconds).
"""

from __future__ import annotations

from dataclasses import dataclass

import rules
from django.contrib.auth import get_user_model
from django.db.models import Q
from rest_framework import exceptions

from .models import Agent, AgentScope, Membership, Project

ROLE_RANK: dict[str, int] = {Membership.Role.ANNOTATOR: 1, Membership.Role.REVIEWER: 2, Membership.Role.MANAGER: 3}
ALL_SCOPES = list(AgentScope.values)
# New tokens get the least their kind needs; more only through explicit flags (admin, create_agent).
DEFAULT_SCOPES: dict[str, list[str]] = {
    Agent.Kind.SIM: [AgentScope.INGEST],
    Agent.Kind.ROBOT: [AgentScope.INGEST, AgentScope.TELEOP],
    Agent.Kind.RL_WORKER: [AgentScope.REWARDS],
}


# ---- who the caller is -----------------------------------------------------------------------------


def actor_of(request):
    """The caller of a Django or DRF request (User, Agent or AnonymousUser)."""
    return getattr(request, "user", None)


def actor_of_scope(scope):
    """The caller of a WebSocket: the agent of a token (AgentTokenMiddleware) or the session's user."""
    return scope.get("agent") or scope.get("user")


def is_agent(actor) -> bool:
    return isinstance(actor, Agent)


def is_site_admin(actor) -> bool:
    return bool(getattr(actor, "is_superuser", False) and getattr(actor, "is_active", False))


def project_role_rank(actor, project_id: int) -> int:
    """0 when the person is no member of the project, else the rank of the role. Only users have roles:
    agents, anonymous and trusted-network callers (projects.gate.auth.TrustedClient) rank 0."""
    if not isinstance(actor, get_user_model()) or not actor.is_authenticated:
        return 0
    cache = actor.__dict__.setdefault("_rs_roles", {})
    if project_id not in cache:
        role = Membership.objects.filter(project_id=project_id, user=actor).values_list("role", flat=True).first()
        cache[project_id] = ROLE_RANK.get(role or "", 0)
    return cache[project_id]


def agent_grants(agent: Agent) -> tuple[frozenset[int], frozenset[int]]:
    """(project ids, deployment ids) an agent token names; cached on the object."""
    grants = agent.__dict__.get("_rs_grants")
    if grants is None:
        grants = (
            frozenset(agent.projects.values_list("pk", flat=True)),
            frozenset(agent.deployments.values_list("pk", flat=True)),
        )
        agent.__dict__["_rs_grants"] = grants
    return grants


def agent_sees_project(agent: Agent, project_id: int | None) -> bool:
    return agent.all_projects or (project_id is not None and project_id in agent_grants(agent)[0])


def agent_sees_deployment(agent: Agent, deployment_id: int, project_id: int | None) -> bool:
    return agent_sees_project(agent, project_id) or deployment_id in agent_grants(agent)[1]


# ---- rules predicates ------------------------------------------------------------------------------


def _project_id(obj) -> int | None:
    return obj if isinstance(obj, int) else getattr(obj, "pk", None)


@rules.predicate
def site_admin(actor) -> bool:
    return is_site_admin(actor)


@rules.predicate
def member(actor, project) -> bool:
    project_id = _project_id(project)
    return project_id is not None and project_role_rank(actor, project_id) > 0


@rules.predicate
def agent_on_project(actor, project) -> bool:
    return is_agent(actor) and project is not None and agent_sees_project(actor, _project_id(project))


def has_role(role: str):
    rank = ROLE_RANK[role]

    @rules.predicate(name=f"has_role_{role}")
    def predicate(actor, project) -> bool:
        project_id = _project_id(project)
        return project_id is not None and project_role_rank(actor, project_id) >= rank

    return predicate


def has_scope(scope: str):
    @rules.predicate(name=f"has_scope_{scope}")
    def predicate(actor) -> bool:
        return is_agent(actor) and scope in (actor.scopes or [])

    return predicate


def _project_rule(perm: Perm):
    predicate = site_admin
    if perm.role is not None:
        predicate = predicate | has_role(perm.role)
    if perm.scope is not None:
        predicate = predicate | (agent_on_project & has_scope(perm.scope))
    return predicate


def _deployment_ids(deployment) -> tuple[int, int | None]:
    """(id, project id) of a Deployment row or an inference.serving.DeploymentConfig."""
    pk = getattr(deployment, "pk", None)
    return (deployment.id if pk is None else pk), deployment.project_id


@rules.predicate
def deployment_visible(actor, deployment) -> bool:
    if deployment is None:
        return False
    pk, project_id = _deployment_ids(deployment)
    if is_agent(actor):
        return agent_sees_deployment(actor, pk, project_id)
    return project_id is not None and project_role_rank(actor, project_id) > 0


def _deployment_role(role: str):
    rank = ROLE_RANK[role]

    @rules.predicate(name=f"deployment_role_{role}")
    def predicate(actor, deployment) -> bool:
        project_id = _deployment_ids(deployment)[1]
        return project_id is not None and project_role_rank(actor, project_id) >= rank

    return predicate


@rules.predicate
def trusted_network(actor) -> bool:
    """A tokenless caller from TRUSTED_CIDRS (projects.gate.auth.TrustedClient): rewards from any deployment."""
    return bool(getattr(actor, "trusted_network", False))


SEES_PROJECT = site_admin | member | agent_on_project
SEES_DEPLOYMENT = site_admin | deployment_visible | trusted_network


def _deployment_rule(perm: Perm, *, trusted: bool):
    predicate = site_admin
    if perm.role is not None:
        predicate = predicate | _deployment_role(perm.role)
    if perm.scope is not None:
        predicate = predicate | (deployment_visible & has_scope(perm.scope))
    if trusted:
        predicate = predicate | trusted_network
    return predicate


@dataclass(frozen=True)
class Perm:
    """A permission: the least project role a person needs and the token scope an agent needs, on a project or
    on a deployment (`on`). Apps declare theirs in their `permissions` module with `project_perm` or
    `deployment_perm`, which register the rule."""

    name: str
    role: str | None  # None: people never get it from a role (admins only)
    scope: str | None  # None: agents never get it
    what: str
    on: str = "project"  # or "deployment"


PERMS: dict[str, Perm] = {}  # every registered permission by name (the apps' permissions modules fill it)
DEPLOYMENT_PERMS: dict[str, Perm] = {}


def project_perm(name: str, role: str | None, scope: str | None, what: str) -> Perm:
    """Declare a permission on a project (or its id) and register its rule."""
    perm = Perm(name, role, scope, what)
    PERMS[name] = perm
    rules.set_perm(name, _project_rule(perm))
    return perm


def deployment_perm(name: str, role: str | None, scope: str | None, what: str, *, trusted: bool = False) -> Perm:
    """Declare a permission on a deployment and register its rule; `trusted`: tokenless callers from
    TRUSTED_CIDRS (projects.gate.auth.TrustedClient) have it too."""
    perm = Perm(name, role, scope, what, on="deployment")
    DEPLOYMENT_PERMS[name] = perm
    rules.set_perm(name, _deployment_rule(perm, trusted=trusted))
    return perm


def registered(name: str) -> Perm:
    """A permission another app declares, by name (for an app below it, which may not import it)."""
    return PERMS.get(name) or DEPLOYMENT_PERMS[name]


# ---- checks for views --------------------------------------------------------------------------------


class NotVisible(exceptions.NotFound):
    default_detail = "Not found."


def refusal(actor, perm: Perm) -> str:
    if is_agent(actor):
        if perm.scope is None:
            return f"agent tokens may not {perm.what}"
        return f"this token lacks the '{perm.scope}' scope needed to {perm.what}"
    if perm.role is None:
        return f"only site admins may {perm.what}"
    return f"you need the {perm.role} role in this project to {perm.what}"


def check(actor, perm: Perm, obj) -> int:
    """200, 404 or 403: what `require` would answer (for pages and consumers)."""
    sees = SEES_DEPLOYMENT if perm.on == "deployment" else SEES_PROJECT
    if not getattr(actor, "is_authenticated", False):
        return 401
    if not sees.test(actor, obj):
        return 404
    if not rules.has_perm(perm.name, actor, obj):
        return 403
    return 200


def require(actor, perm: Perm, obj, *, not_found: str | None = None) -> None:
    """Raise DRF's 401/404/403 unless `actor` may `perm` on `obj` (a project, project id or deployment).
    `not_found`: the 404's message, the same as for a missing object so that it tells nothing."""
    outcome = check(actor, perm, obj)
    if outcome == 401:
        raise exceptions.NotAuthenticated()
    if outcome == 404:
        raise NotVisible(not_found)
    if outcome == 403:
        raise exceptions.PermissionDenied(refusal(actor, perm))


def require_page(request, perm: Perm, obj) -> None:
    """The same for server-rendered pages (Django's 404 / 403 pages)."""
    from django.core.exceptions import PermissionDenied
    from django.http import Http404

    outcome = check(actor_of(request), perm, obj)
    if outcome in (401, 404):
        raise Http404("Not found")
    if outcome == 403:
        raise PermissionDenied(refusal(actor_of(request), perm))


WS_CLOSE = {401: 4401, 403: 4403, 404: 4404}


def can(actor, perm: Perm, obj) -> bool:
    return check(actor, perm, obj) == 200


def require_scope(agent: Agent, perm: Perm) -> None:
    """For lists an agent reads: 403 unless its token has the permission's scope."""
    if perm.scope is None or perm.scope not in (agent.scopes or []):
        raise exceptions.PermissionDenied(refusal(agent, perm))


def scope_refusal(actor, perm: Perm) -> str | None:
    """The 403 message for an agent token that lacks the permission's scope, None for any other caller. Asked
    before the object is looked up (it says nothing about the object), so such a token hears what it lacks
    rather than a 404 for a deployment it could never use."""
    if is_agent(actor) and (perm.scope is None or perm.scope not in (actor.scopes or [])):
        return refusal(actor, perm)
    return None


def require_token_scope(actor, perm: Perm) -> None:
    """Raise DRF's 403 naming the missing scope when `actor` is an agent token without it (`scope_refusal`)."""
    refused = scope_refusal(actor, perm)
    if refused is not None:
        raise exceptions.PermissionDenied(refused)


# ---- what a caller may list ----------------------------------------------------------------------


def visible_projects(actor):
    """The projects a caller may see (site admins: all)."""
    if is_site_admin(actor):
        return Project.objects.all()
    if is_agent(actor):
        return Project.objects.all() if actor.all_projects else Project.objects.filter(pk__in=agent_grants(actor)[0])
    if not getattr(actor, "is_authenticated", False):
        return Project.objects.none()
    return Project.objects.filter(memberships__user=actor)


def visible_project_filter(actor, field: str = "project") -> Q:
    """A Q limiting rows with a `field` foreign key to the caller's projects."""
    if is_site_admin(actor) or (is_agent(actor) and actor.all_projects):
        return Q()
    return Q(**{f"{field}__in": visible_projects(actor).values("pk")})


def visible_deployment_filter(actor) -> Q:
    if is_site_admin(actor) or (is_agent(actor) and actor.all_projects):
        return Q()
    if is_agent(actor):
        projects, deployments = agent_grants(actor)
        return Q(project_id__in=projects) | Q(pk__in=deployments)
    return Q(project__in=visible_projects(actor).values("pk"))
