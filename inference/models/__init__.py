"""Inference models: deployments (served reward models) and teleop sessions."""

from .deployment import *  # noqa: F403
from .teleop import *  # noqa: F403
