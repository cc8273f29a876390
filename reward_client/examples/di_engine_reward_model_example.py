"""DI-engine's reward-model lifecycle against Reward Studio (needs numpy, requests, Pillow).

    python -m reward_client.examples.di_engine_reward_model_example --url http://127.0.0.1:8000 \
        --token "$RS_TOKEN" --deployment pick-cube [--train] [--episodes 6 --steps 10]

`DIEngineRewardModel(config, device, tb_logger)` is built the way DI-engine's registry builds reward models
(with DI-engine installed, `import reward_client.di_engine` registers it as type `reward_studio`). The loop
stands in for a collector: synthetic transitions (dark frames, a bright square once the task succeeded)
are collected (`collect_data` uploads each finished episode to the deployment's project), optionally
retrained (`retrain_now` + `retrain_wait`: proposals, snapshot, job, then the deployment switches when the
new model is more accurate; needs a Celery training worker), then estimated on `next_obs`.
`env_reward` says where the env reward goes, so it is never added twice.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from reward_client import RewardServiceError
from reward_client.di_engine import DIEngineRewardModel


def episode(rng: np.random.Generator, steps: int, size: int) -> list[dict]:
    def frame(success: bool) -> np.ndarray:
        image = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
        if success:
            image[size // 4 : 3 * size // 4, size // 4 : 3 * size // 4] = (230, 40, 40)
        return image

    out = []
    obs = frame(False)
    for t in range(steps):
        success = t >= steps // 2  # reached with this transition: its next_obs shows it
        next_obs = frame(success)
        out.append(
            {
                "obs": obs,
                "next_obs": next_obs,
                "action": np.zeros(2, np.float32),
                "reward": np.array([float(success)], np.float32),
                "done": t == steps - 1,
                "info": {"success": success},
            }
        )
        obs = next_obs
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", required=True)
    parser.add_argument("--deployment", required=True)
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--train", action="store_true", help="also snapshot, train and redeploy")
    args = parser.parse_args()

    config = {
        "type": "reward_studio",
        "url": args.url,
        "token": args.token,
        "deployment": args.deployment,
        "env_reward": "ignore",  # the estimated reward replaces the env reward
        "uploads": "all",  # every finished episode goes to the deployment's project
        "success_rule": "info",  # each step's success: info['success'] (these transitions carry it)
        "snapshot_options": {"sources": ["human", "proposal"], "trend": False},
        "job_config": {"image_size": [3, args.size, args.size], "epochs": 3, "hidden_dim": 32},
    }
    rng = np.random.default_rng(0)
    try:
        model = DIEngineRewardModel(config, "cpu", None)
        for _ in range(args.episodes):
            model.collect_data(episode(rng, args.steps, args.size))
        print(f"uploaded {len(model.uploaded)} episodes to the deployment's project")
        if args.train:  # in a DI-engine pipeline, train() only starts or advances it and returns at once
            model.retrain_now()
            print(f"retrained: {model.retrain_wait(timeout_s=3600)}")
        data = episode(rng, args.steps, args.size)
        estimated = model.estimate(data)
        print("estimated rewards:", [round(float(item["reward"][0]), 3) for item in estimated])
        model.clear_data()
    except RewardServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
