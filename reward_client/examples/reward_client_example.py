"""Rewards for an RL loop from a Reward Studio deployment (needs only numpy and requests).

    python -m reward_client.examples.reward_client_example --url http://127.0.0.1:8000 \
        --token "$RS_TOKEN" --deployment pick-cube [--envs 8 --steps 20 --frames FILE.npz]

Create the token with `python manage.py create_agent rl-worker-1 --kind rl_worker` (or in the admin) and
the deployment in the admin or with `POST /api/deployments/`. The loop below stands in for parallel
simulators: each step it sends one real frame per env (the bundled `pickcube_frames.npz`: PickCube-v1 frames of
the demo's main camera, 4 before and 4 after the cube is lifted, with those labels; `--frames` takes any .npz with
a uint8 `frames` [N,H,W,3] array and optional 0/1 `labels`) with the env rewards and done flags, prints what the
deployment answers and how often it agrees with the labels. Then it sends random noise, a frame no camera of
the task shows: a deployment that flags it (`ood_action` `fail_reward`) answers a failure, and the example says
so; one that pays noise as a success is reported as a reward that can be fooled. The adapters at the end show
the RLinf and DI-engine call shapes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from reward_client import DIEngineRewardModel, RewardClient, RewardServiceError, RLinfRewardModel

# 8 frames of the demo's main camera (128x128) from its scripted PickCube-v1 episode of seed 2000 (webapp.demo):
# steps 0, 20, 40, 60 (labeled fail, the cube on the table) and 64, 74, 85, 96 (labeled success, lifted).
SAMPLE = Path(__file__).with_name("pickcube_frames.npz")


def real_frames(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """The frames (uint8 [N,H,W,3]) and their 0/1 labels (None when the file has none)."""
    with np.load(path) as data:
        frames = np.ascontiguousarray(data["frames"], dtype=np.uint8)
        labels = data["labels"].astype(bool) if "labels" in data.files else None
    if frames.ndim != 4 or frames.shape[-1] != 3 or not len(frames):
        raise SystemExit(f"{path}: `frames` must be a non-empty uint8 [N,H,W,3] array, got {frames.shape}")
    return frames, labels


def noise_check(client: RewardClient, envs: int, size: tuple[int, int]) -> bool:
    """Send random noise; True when the deployment answers it as a failure (what a reward should do)."""
    noise = np.random.default_rng(1).integers(0, 256, size=(envs, *size, 3), dtype=np.uint8)
    result = client.compute_rewards(noise)
    ood = sum(bool(item.get("ood")) for item in result.items) if result.items else 0
    paid = int(result.success.sum())
    print(
        f"noise    | success {paid}/{envs} | reward {result.rewards.mean():+.3f} | flagged off-distribution {ood}/{envs}"
    )
    if paid == 0:
        print("noise: failure, as it should be (frames unlike the training data are not paid)")
        return True
    print(
        "noise: PAID AS SUCCESS: this deployment would reward frames it never saw (a covered camera, a policy "
        "exploiting an odd corner of the scene); set its ood_action to fail_reward or retrain"
    )
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", required=True)
    parser.add_argument("--deployment", required=True)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--frames", type=Path, default=SAMPLE, help="a .npz with `frames` (and `labels`)")
    args = parser.parse_args()

    client = RewardClient(args.url, args.token, deployment=args.deployment)
    rng = np.random.default_rng(0)
    sample, labels = real_frames(args.frames)
    agree = judged = 0
    try:
        for step in range(args.steps):
            picks = rng.integers(0, len(sample), size=args.envs)
            frames = sample[picks]
            env_rewards = rng.normal(size=args.envs).astype(np.float32)
            dones = np.zeros(args.envs, dtype=bool) if step < args.steps - 1 else np.ones(args.envs, dtype=bool)
            started = time.perf_counter()
            result = client.compute_rewards(frames, env_rewards=env_rewards, dones=dones)
            ms = (time.perf_counter() - started) * 1000
            if labels is not None:
                agree += int((result.success == labels[picks]).sum())
                judged += args.envs
            print(
                f"step {step:3d} | {ms:6.1f} ms | p {np.nanmean(result.probabilities):.3f} | "
                f"success {int(result.success.sum())}/{args.envs} | reward {result.rewards.mean():+.3f}"
            )
        if judged:
            print(f"real frames: the deployment agrees with their labels on {agree}/{judged}")
        noise_check(client, args.envs, (int(sample.shape[1]), int(sample.shape[2])))
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
