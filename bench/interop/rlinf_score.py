"""Scores a snapshot's validation frames with RLinf 0.3.0's own classes, as an RLinf run pointed at our model would.

Not a bench: a script bench/tour_model.py --rlinf runs in the interop environment (`.interop/bin/python`, scripts/lib.sh
`ensure_interop_env`); imports RLinf, torch and numpy only, never the project. JSON on stdin: `val` (a snapshot's
`val.pt`) and `model` (RLinf's `reward.model` block, training.resnet.rlinf_match.rlinf_reward_model_config).
Prints one JSON object: `probabilities` (RLinf's ResNetRewardModel.compute_reward over RewardBinaryDataset's
images) and `labels`.
"""

from __future__ import annotations

import json
import sys

import torch


def main() -> None:
    from omegaconf import OmegaConf
    from rlinf.data.datasets.reward_model import RewardBinaryDataset
    from rlinf.models.embodiment.reward import get_reward_model_class

    args = json.loads(sys.stdin.read())
    torch.set_num_threads(1)
    dataset = RewardBinaryDataset(args["val"])
    cfg = OmegaConf.create(args["model"])
    model = get_reward_model_class(cfg.model_type)(cfg).eval()
    probabilities = []
    with torch.no_grad():
        for start in range(0, len(dataset), 64):
            images = torch.stack(dataset.images[start : start + 64])
            probabilities += model.compute_reward({"main_images": images}).float().tolist()
    labels = [int(label) for label in dataset.labels]
    sys.stdout.write("\n" + json.dumps({"probabilities": probabilities, "labels": labels}) + "\n")


if __name__ == "__main__":
    main()
