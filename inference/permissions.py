"""What serving's views ask (projects/access.py decides who has them): deploying a project's models, and on a
deployment seeing it, asking it for rewards (tokenless callers from TRUSTED_CIDRS too), changing it and switching
its model."""

from __future__ import annotations

from projects.access import deployment_perm, project_perm
from projects.models import AgentScope, Membership

Role = Membership.Role

DEPLOY_PROJECT = project_perm("inference.deploy_project", Role.MANAGER, None, "deploy the project's models")
DEPLOYMENT_VIEW = deployment_perm(
    "inference.view_deployment", Role.ANNOTATOR, AgentScope.REWARDS, "see it", trusted=True
)
REWARDS = deployment_perm(
    "inference.use_deployment", Role.ANNOTATOR, AgentScope.REWARDS, "ask for rewards", trusted=True
)
DEPLOY = deployment_perm("inference.change_deployment", Role.MANAGER, None, "change deployments")
SWITCH_MODEL = deployment_perm(
    "inference.switch_deployment_model", Role.MANAGER, AgentScope.TRAINING, "switch a deployment's model"
)
