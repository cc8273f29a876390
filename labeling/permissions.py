"""What labeling's views ask (projects/access.py decides who has them): reading and labeling a project,
deciding proposals, changing the project, ingesting and reading episodes, streaming teleop sessions."""

from __future__ import annotations

from projects.access import project_perm
from projects.models import AgentScope, Membership

Role = Membership.Role

VIEW = project_perm("labeling.view_project", Role.ANNOTATOR, AgentScope.LABELS, "read the project's labels")
LABEL = project_perm("labeling.label_project", Role.ANNOTATOR, AgentScope.LABELS, "label")
REVIEW = project_perm("labeling.review_project", Role.REVIEWER, AgentScope.LABELS, "decide proposals")
MANAGE = project_perm("labeling.manage_project", Role.MANAGER, None, "change the project")
INGEST = project_perm("labeling.ingest_project", Role.MANAGER, AgentScope.INGEST, "ingest episodes")
EPISODE_READ = project_perm("labeling.read_episode", Role.ANNOTATOR, AgentScope.INGEST, "read episodes")
TELEOP = project_perm("labeling.teleop_project", None, AgentScope.TELEOP, "stream teleop sessions")
