"""Rewards for an RL loop from a Reward Studio deployment (needs only numpy and requests).

    python -m reward_client.examples.reward_client_example --url http://127.0.0.1:8000 \
        --token "$RS_TOKEN" --deployment pick-cube [--envs 8 --steps 20 --size 128]

Create the token with `python manage.py create_agent rl-worker-1 --kind rl_worker` (or in the admin) and
the deployment in the admin or with `POST /api/deployments/`. The loop below stands in for parallel
simulators: each step it sends one frame per env with the env rewards and done flags, and prints what the
deployment answers. The adapters at the end show the RLinf and DI-engine call shapes.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from reward_client import DIEngineRewardModel, RewardClient, RewardServiceError, RLinfRewardModel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", required=True)
    parser.add_argument("--deployment", required=True)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()

    client = RewardClient(args.url, args.token, deployment=args.deployment)
    rng = np.random.default_rng(0)
    try:
        for step in range(args.steps):
            frames = rng.integers(0, 256, size=(args.envs, args.size, args.size, 3), dtype=np.uint8)
            env_rewards = rng.normal(size=args.envs).astype(np.float32)
            dones = np.zeros(args.envs, dtype=bool) if step < args.steps - 1 else np.ones(args.envs, dtype=bool)
            started = time.perf_counter()
            result = client.compute_rewards(frames, env_rewards=env_rewards, dones=dones)
            ms = (time.perf_counter() - started) * 1000
            print(
                f"step {step:3d} | {ms:6.1f} ms | p {np.nanmean(result.probabilities):.3f} | "
                f"success {int(result.success.sum())}/{args.envs} | reward {result.rewards.mean():+.3f}"
            )
        # The same deployment in the shapes RL code already calls.
        rewards = RLinfRewardModel(client).compute_rewards({"main_images": frames})
        print("RLinf-style compute_rewards:", np.round(rewards, 3))
        data = [{"next_obs": frame, "reward": np.array([0.0], np.float32), "done": False} for frame in frames]
        print(
            "DI-engine-style estimate:",
            [round(float(item["reward"][0]), 3) for item in DIEngineRewardModel(client).estimate(data)],
        )
    except RewardServiceError as exc:
        print(f"reward service error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
