"""What training's views ask (projects/access.py decides who has them): reading training data, making
snapshots and training."""

from __future__ import annotations

from projects.access import project_perm
from projects.models import AgentScope, Membership

Role = Membership.Role

TRAINING_VIEW = project_perm("training.view_project", Role.ANNOTATOR, AgentScope.TRAINING, "read training data")
TRAIN = project_perm("training.train_project", Role.MANAGER, AgentScope.TRAINING, "make snapshots and train")
