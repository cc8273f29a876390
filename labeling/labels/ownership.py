"""Who may change which labels and episodes: the two ownership rules, beside the label rows they read.

Project roles, token scopes and the 404/403 answers are projects/access.py's; these add what only labeling
knows: an agent appends to its own episodes, an annotator changes only their own human labels.
"""

from __future__ import annotations

from django.db.models import Q
from rest_framework import exceptions

from projects.access import ROLE_RANK, is_agent, is_site_admin, project_role_rank
from projects.models import Membership

from ..models import FrameLabel, LabelSource, WindowLabel


def require_own_episode(actor, episode) -> None:
    """Agents append to and finish only the episodes they created (people with the role may do any)."""
    if is_agent(actor) and not is_site_admin(actor) and episode.agent_id != actor.pk:
        raise exceptions.PermissionDenied("this episode belongs to another agent")


def require_may_change_labels(actor, episode, *, steps=(), spans=()) -> None:
    """Annotators change only their own and unlabeled human labels; reviewers, managers, admins and
    agents with the labels scope may change anyone's. `steps`: step indices; `spans`: (start, end)."""
    if is_agent(actor) or is_site_admin(actor):
        return
    if project_role_rank(actor, episode.project_id) >= ROLE_RANK[Membership.Role.REVIEWER]:
        return
    others = Q(author__isnull=True) | ~Q(author=actor)
    human = {"episode": episode, "source": LabelSource.HUMAN}
    clash = False
    if steps:
        clash = FrameLabel.objects.filter(others, step__index__in=list(steps), **human).exists()
    if not clash and spans:
        span_q = Q()
        for start, end in spans:
            span_q |= Q(start=start, end=end)
        clash = WindowLabel.objects.filter(others, span_q, **human).exists()
    if clash:
        raise exceptions.PermissionDenied("changing other people's labels needs the reviewer role in this project")
