"""RLinf's reward-model call against a Reward Studio deployment (needs numpy, requests, Pillow).

    python -m reward_client.examples.rlinf_reward_model_example --url http://127.0.0.1:8000 \
        --token "$RS_TOKEN" --deployment pick-cube [--threshold 0.5] [--envs 8 --steps 5]

The config below is RLinf's `reward` section (the keys its env and reward workers read) plus a
`reward_studio` block naming the service. `RLinfRewardModel(cfg).compute_reward(obs)` answers what
RLinf's own `ResNetRewardModel.compute_reward` would: the model output per env, which RLinf's env worker
then combines as `env_reward_weight * env_reward + reward_weight * output` (so the env reward is not sent).
With `--threshold`, the deployment must use reward_type `thresholded` at that threshold, without it `soft`
(checked at start when a token is given).
Leave `--token` out from a network the server trusts (`TRUSTED_CIDRS`).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from reward_client import RewardServiceError
from reward_client.rlinf import RLinfRewardModel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", default=None)
    parser.add_argument("--deployment", required=True)
    parser.add_argument("--threshold", type=float, default=None, help="RLinf's reward.model.reward_threshold")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()

    reward_cfg = {
        "use_reward_model": True,
        "reward_mode": "per_step",
        "reward_weight": 1.0,
        "env_reward_weight": 0.0,
        "model": {"model_type": "resnet", "reward_threshold": args.threshold},
        "reward_studio": {"url": args.url, "token": args.token, "deployment": args.deployment},
    }
    try:
        model = RLinfRewardModel(reward_cfg)
        rng = np.random.default_rng(0)
        for step in range(args.steps):
            obs = {"main_images": rng.integers(0, 256, (args.envs, args.size, args.size, 3), dtype=np.uint8)}
            rewards = model.compute_reward(obs)
            print(f"step {step}: rewards {np.round(rewards, 3).tolist()}")
    except (RewardServiceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
