"""Reward Studio's client for RL machines: `RewardClient` (rewards from a deployment over HTTP) and the
adapters RLinf and DI-engine construct. No Django, no torch: `pip install ./reward_client`.

    from reward_client import RewardClient
    client = RewardClient("http://studio:8000", token, deployment="pick-cube")
    rewards = client.compute_rewards(images).rewards
"""

from .client import RewardClient, RewardResult
from .di_engine import DIEngineRewardModel
from .errors import (
    AuthenticationError,
    BadRequestError,
    ConnectionFailed,
    NotFoundError,
    RewardServiceError,
    ServiceBusy,
    ServiceUnavailable,
)
from .rlinf import RLinfHistoryRewardModel, RLinfRewardModel

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "ConnectionFailed",
    "DIEngineRewardModel",
    "NotFoundError",
    "RLinfHistoryRewardModel",
    "RLinfRewardModel",
    "RewardClient",
    "RewardResult",
    "RewardServiceError",
    "ServiceBusy",
    "ServiceUnavailable",
]
