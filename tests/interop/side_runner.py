"""Runs RLinf's released code in the interop environment (scripts/lib.sh `ensure_interop_env`).

Invoked by tests/interop through `python side_runner.py COMMAND` with a JSON object on stdin; prints one JSON
object on stdout. It imports only RLinf, its pinned peft/transformers and the shared libraries, never the
project, so what it reports is what a user of the `rlinf` 0.3.0 release gets from our files.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import torch

LABELS = ("positive", "negative", "unclear")


def versions(_: dict) -> dict:
    import peft
    import rlinf  # noqa: F401
    import transformers

    return {"peft": peft.__version__, "transformers": transformers.__version__, "torch": torch.__version__}


def vlm_lora_probabilities(args: dict) -> dict:
    """RLinf's HistoryVLMRewardModel (qwentrend input builder) loads the base model and `lora_path`'s
    full_weights.pt in its own `setup_model`; label probabilities come from its model on its own inputs."""
    from omegaconf import OmegaConf
    from rlinf.models.embodiment.reward import get_reward_model_class

    cfg = OmegaConf.create(
        {
            "model_path": args["model_path"],
            "lora_path": args["lora_path"],
            "precision": "fp32",
            "input_builder_name": "qwentrend_input_builder",
            "input_builder_params": {"default_task_description": args["task"]},
            "history_buffers": {"history_window": {"history_size": 5, "input_interval": 1}},
        }
    )
    model = get_reward_model_class("history_vlm")(cfg)
    frames = np.load(args["frames"])  # [B, 2 views, T, H, W, 3] uint8
    # RLinf's history manager hands each env's window over as a list of per-step [H, W, 3] frames
    history_input = {
        "history_window": {
            "main_images": [[torch.from_numpy(f) for f in window[0]] for window in frames],
            "extra_view_images": [[torch.from_numpy(f) for f in window[1]] for window in frames],
        }
    }
    inputs, valid = model.input_builder.build_inputs({}, model._model.device, history_input)
    tokenizer = model._processor.tokenizer
    label_ids = [tokenizer.convert_tokens_to_ids(label) for label in LABELS]
    with torch.no_grad():
        logits = model._model(**inputs).logits[:, -1, :]
    probabilities = torch.softmax(logits[:, label_ids].float(), dim=-1)
    lora_b = [p.abs().sum().item() for n, p in model._model.named_parameters() if "lora_B" in n]
    return {
        "probabilities": probabilities.tolist(),
        "valid": list(valid),
        "input_ids": inputs["input_ids"].tolist(),
        "lora_modules": len(lora_b),
        "lora_b_abs_sum": float(sum(lora_b)),
    }


def history_windows(args: dict) -> dict:
    """RLinf's HistoryManager fed `dones` ([steps][envs]) with one history buffer of `settings`: the number of
    entries in each env's window at each step (0: no window)."""
    from omegaconf import OmegaConf
    from rlinf.workers.env.history_manager import HistoryManager

    dones = args["dones"]
    buffer = {**args["settings"], "history_keys": ["main_images"]}
    cfg = OmegaConf.create({"model": {"history_buffers": {"history_window": buffer}}})
    manager = HistoryManager(cfg, num_envs=len(dones[0]))
    lengths = []
    for step, step_dones in enumerate(dones):
        manager.append_to_history_entries({"main_images": torch.full((len(step_dones), 1), step)})
        _, length = manager.build_history_input(torch.tensor(step_dones))
        lengths.append(length.get("history_window", [0] * len(step_dones)))
    return {"lengths": lengths}


def _digest(array) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, dtype=np.uint8)).tobytes()).hexdigest()[:16]


def resnet_files(args: dict) -> dict:
    """RLinf's RewardBinaryDataset reads `train.pt`/`val.pt`; RLinf's ResNetRewardModel loads each weights file
    in `weights` strictly (its own `_load_model`) and scores the val images with `compute_reward`, as its
    reward worker does."""
    from omegaconf import OmegaConf
    from rlinf.data.datasets.reward_model import RewardBinaryDataset
    from rlinf.models.embodiment.reward import get_reward_model_class

    splits = {}
    for name, path in args["payloads"].items():
        dataset = RewardBinaryDataset(path)
        items = [dataset[i] for i in range(len(dataset))]
        splits[name] = {
            "count": len(dataset),
            "labels": [int(label.item()) for _, label in items],
            "digests": [_digest(image.numpy()) for image, _ in items],
            "shapes": sorted({tuple(image.shape) for image, _ in items}),
        }
    images = torch.stack(RewardBinaryDataset(args["payloads"]["val"]).images)
    probabilities = {}
    for name, path in args["weights"].items():
        cfg = OmegaConf.create({**args["model"], "model_path": path, "pretrained": False, "precision": "fp32"})
        model = get_reward_model_class("resnet")(cfg).eval()
        probabilities[name] = model.compute_reward({"main_images": images}).tolist()
    return {"splits": splits, "probabilities": probabilities}


def binary_payloads(args: dict) -> dict:
    """RLinf's RewardBinaryDataset over each of `paths` (train.pt / val.pt): labels, metadata (keys in order) and,
    per item as its `__getitem__` gives it, the image's dtype, shape and top-left pixel."""
    from rlinf.data.datasets.reward_model import RewardBinaryDataset

    read = {}
    for name, path in args["paths"].items():
        dataset = RewardBinaryDataset(path)
        items = [dataset[i] for i in range(len(dataset))]
        read[name] = {
            "labels": [int(label.item()) for _, label in items],
            "metadata": list(dataset.metadata.items()),
            "dtypes": sorted({str(image.dtype) for image, _ in items}),
            "shapes": sorted({tuple(image.shape) for image, _ in items}),
            "corners": [int(image[0, 0, 0]) for image, _ in items],
        }
    return read


def trend_dataset(args: dict) -> dict:
    """RLinf 0.3.0's VLM trend SFT dataset (`QwenTrendProgressSFTDataset`, rlinf/data/datasets/vlm.py) over a
    manifest, from a working directory that is not the trend folder (paths resolve through `data_root`): each
    sample's answer, question, frames and the prompt tokens its processor builds."""
    import os

    from omegaconf import OmegaConf
    from rlinf.data.datasets.vlm import QwenTrendProgressSFTDataset
    from transformers import AutoTokenizer

    cfg = OmegaConf.create(
        {
            "data": {
                "use_chat_template": True,
                "image_keys": [],
                "prompt_key": "question",
                "answer_key": "answer",
                "max_prompt_length": 4096,
                "data_root": args["data_root"],
            },
            "actor": {"model": {"model_path": args["model_path"]}},
        }
    )
    os.chdir(args["cwd"])
    dataset = QwenTrendProgressSFTDataset(args["manifest"], cfg, AutoTokenizer.from_pretrained(args["model_path"]))
    samples = []
    for index in range(len(dataset)):
        question, answer, videos, _ = dataset._parse_raw_record(dataset._records[index], index, dataset._data_root)
        item = dataset[index]
        prompt_length = int(item.label_mask.sum())
        samples.append(
            {
                "question": question,
                "answer": item.answer,
                "main": [_digest(frame) for frame in videos[0]],
                "extra": [_digest(frame) for frame in videos[1]],
                "shapes": sorted({tuple(np.asarray(frame).shape) for frame in [*videos[0], *videos[1]]}),
                "dtypes": sorted({str(np.asarray(frame).dtype) for frame in [*videos[0], *videos[1]]}),
                "prompt_ids": item.prompt[:prompt_length].tolist(),
                "video_grid": item.multi_modal_inputs["video_grid_thw"].tolist(),
            }
        )
    return {"count": len(dataset), "samples": samples}


COMMANDS = {
    "versions": versions,
    "vlm_lora_probabilities": vlm_lora_probabilities,
    "history_windows": history_windows,
    "resnet_files": resnet_files,
    "trend_dataset": trend_dataset,
    "binary_payloads": binary_payloads,
}


def main() -> None:
    command = sys.argv[1]
    args: dict[str, Any] = json.loads(sys.stdin.read() or "{}")
    result = COMMANDS[command](args)
    sys.stdout.write("\n" + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
