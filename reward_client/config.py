"""Reading the RL frameworks' configs (dicts, OmegaConf DictConfigs, EasyDicts, plain objects) and building a
RewardClient from the `reward_studio` block in them."""

from __future__ import annotations

import os
from typing import Any

from .client import RewardClient


def cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """`cfg[key]` for dicts, OmegaConf DictConfigs, EasyDicts and plain objects alike (None counts as unset)."""
    if cfg is None:
        return default
    if hasattr(cfg, "get"):
        value = cfg.get(key, default)
        return default if value is None else value
    return getattr(cfg, key, default)


def client_from_config(cfg: Any) -> RewardClient:
    """A RewardClient from a `reward_studio` block (or the config itself): url, token, deployment, timeout,
    transport (auto, http or shm: RewardClient); env RS_URL, RS_TOKEN, RS_DEPLOYMENT, RS_TRANSPORT where the
    block leaves them out."""
    block = cfg_get(cfg, "reward_studio", cfg)
    url = cfg_get(block, "url") or os.environ.get("RS_URL")
    deployment = cfg_get(block, "deployment") or os.environ.get("RS_DEPLOYMENT")
    token = cfg_get(block, "token") or os.environ.get("RS_TOKEN")
    if not url or not deployment:
        raise ValueError("name the service: reward_studio.url and reward_studio.deployment (or RS_URL, RS_DEPLOYMENT)")
    transport = cfg_get(block, "transport") or os.environ.get("RS_TRANSPORT") or "auto"
    return RewardClient(
        url, token, deployment=deployment, timeout=float(cfg_get(block, "timeout", 120.0)), transport=transport
    )
