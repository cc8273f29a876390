"""Job kinds: which config validates a job's config and which trainer runs it, both from the family
registry (`training.families`); what a trainer returns is `training.family_parts.RunResult`."""

from __future__ import annotations

from typing import Any

from .families import family
from .family_parts import FamilyConfig, Trainer


def config_class(kind: str) -> type[FamilyConfig]:
    return family(kind).config_class


def validate_config(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """The normalised config (defaults filled in); ValueError with the reason when it is unusable."""
    return config_class(kind).from_dict(data).to_dict()


def default_config(kind: str) -> dict[str, Any]:
    return config_class(kind)().to_dict()


def get_runner(kind: str) -> Trainer:
    return family(kind).trainer
