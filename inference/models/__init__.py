"""Inference models: deployments (served reward models) and teleop sessions."""

from .deployment import *  # noqa: F403
from .monitor import *  # noqa: F403, E402
from .teleop import *  # noqa: F403
