"""Writes for the house's core: projects (made with their creator as manager), memberships, and agents with
their tokens (shown once; only a hash is stored)."""

from __future__ import annotations

import re

from django.db import transaction

from .access import ALL_SCOPES, DEFAULT_SCOPES
from .models import Agent, Membership, Project
from .tokens import hash_token, new_token


def agent_create(
    *,
    name: str,
    kind: str = Agent.Kind.SIM,
    scopes: list[str] | None = None,
    projects: list[Project] | None = None,
    deployments: list | None = None,
    all_projects: bool = False,
) -> tuple[Agent, str]:
    """A new agent and its token. The token is returned once; only its hash is stored.

    Least privilege unless told otherwise: the scopes its kind needs (projects.access.DEFAULT_SCOPES) and
    no project or deployment; `all_projects` grants every project and deployment."""
    scopes = list(DEFAULT_SCOPES.get(kind, []) if scopes is None else scopes)
    unknown = sorted(set(scopes) - set(ALL_SCOPES))
    if unknown:
        raise ValueError(f"unknown scope {unknown[0]!r}: choose from {', '.join(ALL_SCOPES)}")
    token = new_token()
    with transaction.atomic():
        agent = Agent.objects.create(
            name=name,
            kind=kind,
            token_hash=hash_token(token),
            token_prefix=token[:10],
            scopes=[s for s in ALL_SCOPES if s in scopes],
            all_projects=all_projects,
        )
        agent.projects.set(projects or [])
        agent.deployments.set(deployments or [])
    return agent, token


CAMERA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
MAX_CAMERAS = 8


def camera_views_parse(text: str) -> list[str]:
    """Camera names from `main, extra` (commas or spaces): 1 to MAX_CAMERAS distinct names of letters, digits,
    - and _; the first is the one the binary dataset and the teleop dashboard use by default."""
    names = [part for part in text.replace(",", " ").split() if part]
    if not names:
        raise ValueError("name at least one camera, e.g. main")
    if len(names) > MAX_CAMERAS:
        raise ValueError(f"at most {MAX_CAMERAS} cameras")
    bad = [name for name in names if not CAMERA_NAME.match(name)]
    if bad:
        raise ValueError(f"camera names are letters, digits, - and _ (at most 32): {', '.join(bad)}")
    if len(set(names)) != len(names):
        raise ValueError("each camera once")
    return names


@transaction.atomic
def project_create(*, name: str, task_description: str, camera_views: list[str], creator) -> Project:
    """A new project with its creator as manager (people see only the projects they belong to)."""
    if Project.objects.filter(name=name).exists():
        raise ValueError(f"a project named {name!r} already exists")
    project = Project.objects.create(name=name, task_description=task_description, camera_views=camera_views)
    Membership.objects.create(project=project, user=creator, role=Membership.Role.MANAGER)
    return project


def membership_set(*, project: Project, user, role: str | None) -> Membership | None:
    """Give `user` a role in `project` (None removes them)."""
    if role is None:
        Membership.objects.filter(project=project, user=user).delete()
        return None
    if role not in Membership.Role.values:
        raise ValueError(f"unknown role {role!r}: choose from {', '.join(Membership.Role.values)}")
    membership, _ = Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
    return membership


def agent_rotate_token(*, agent: Agent) -> str:
    token = new_token()
    agent.token_hash = hash_token(token)
    agent.token_prefix = token[:10]
    agent.save(update_fields=["token_hash", "token_prefix"])
    return token
