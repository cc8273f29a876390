"""Does RLinf's own `ResNetRewardModel` (rlinf 0.3.0) score a checkpoint of ours exactly as the service does?

Plain functions over a `ResNetConfig`, no Django and no torch. RLinf's class builds the same network
(`backbone.*` with our head) and preprocesses as `RewardResNet.preprocess` does for RGB frames: channels last
to NCHW, /255, a bilinear resize to `image_size`, ImageNet normalisation. It has nothing more: a model trained
with anything that changes what the network sees (a `crop`) loads strictly there and silently answers
something else. `tests/interop/test_rlinf_presets.py` holds this rule against RLinf's released class for every
preset the job form offers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import ResNetConfig

# The architectures RLinf's ResNetRewardModel builds (its SUPPORTED_ARCHS).
RLINF_ARCHS = frozenset({"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"})


@dataclass(frozen=True)
class RLinfMatch:
    """`equal`: RLinf's class, given `reward_model_config`, reproduces the served probabilities (fp32).
    `reason`: why not, and what to do instead (empty when equal)."""

    equal: bool
    reason: str = ""


def rlinf_match(config: ResNetConfig) -> RLinfMatch:
    """Whether RLinf's ResNetRewardModel reproduces this model's served probabilities, and if not, why."""
    if config.crop:
        box = ", ".join(f"{v:g}" for v in config.crop)
        return RLinfMatch(
            False,
            f"trained on a crop of each frame ([{box}]); RLinf's ResNetRewardModel has no crop and would score the "
            "whole frame, so it loads these weights and answers something else. Serve it from Reward Studio "
            "(RLinf's remote plugin, reward_client.rlinf_plugin), or train again with no crop (the PickCube preset).",
        )
    if config.arch not in RLINF_ARCHS:
        return RLinfMatch(False, f"arch {config.arch!r} is not one RLinf's ResNetRewardModel builds")
    return RLinfMatch(True)


def rlinf_reward_model_config(config: ResNetConfig, model_path: str) -> dict[str, Any]:
    """RLinf's `reward.model` block that loads `model_path` (our `model.safetensors` or RLinf-layout
    `full_weights.pt`) into its own class: `pretrained` false (RLinf's default true downloads ImageNet weights
    before loading ours), fp32 as the service's default precision."""
    return {
        "model_type": "resnet",
        "arch": config.arch,
        "hidden_dim": config.hidden_dim,
        "dropout": config.dropout,
        "image_size": list(config.image_size),
        "normalize": True,
        "pretrained": False,
        "precision": "fp32",
        "model_path": model_path,
    }


def rlinf_match_for(kind: str, config: dict[str, Any]) -> RLinfMatch | None:
    """`rlinf_match` for a stored model's kind and config JSON; None for kinds this rule is not about (VLMs)."""
    if kind != "resnet":
        return None
    try:
        return rlinf_match(ResNetConfig.from_dict(config))
    except ValueError as error:  # an old row whose config no longer validates
        return RLinfMatch(False, f"its config does not build a model here: {error}")
