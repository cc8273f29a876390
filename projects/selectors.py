"""Reads of the house's core: the deployments an agent may be granted (through the relation, so this app names
no serving module)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Model

from .models import Agent


def agent_deployment_model() -> type[Model]:
    """The deployment model an agent's `deployments` come from (Deployment.agents), found through the relation
    (so this app names no serving module)."""
    return Agent._meta.get_field("deployments").related_model


def deployments_by_name(names: Iterable[str]) -> tuple[list[Model], list[str]]:
    """The deployments an agent may be granted, by name, and the names that match none."""
    wanted = list(dict.fromkeys(names))
    found = agent_deployment_model()._default_manager.in_bulk(wanted, field_name="name")
    return [found[n] for n in wanted if n in found], [n for n in wanted if n not in found]
