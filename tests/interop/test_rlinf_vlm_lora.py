"""RLinf 0.3.0's `history_vlm` reward model, built as its reward worker builds it from its documented YAML, loads the
`full_weights.pt` our VLM training writes and, through its own HistoryManager and `compute_reward`, gives the
rewards and label probabilities our service gives: under peft 0.11.1 (RLinf's pin elsewhere) and under the newest
peft its `embodied` extra allows (unpinned). The model is trained with `lora_alpha` = 2 x rank, which RLinf's loader
(alpha = rank) would score at half the scale if the export did not carry the scale in `lora_B`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from training.vlm.config import VLMTrainConfig
from training.vlm.data import TrendWindow

from .conftest import side_run

TASK = "Pick up the red cube"
COLOURS = {"positive": (220, 30, 30), "negative": (30, 30, 220), "unclear": (30, 200, 30)}
# the two stacks (transformers 4.57.6 + peft 0.11.1/0.21.2 against 5.24 + 0.21.2) run different kernels in float32
TOLERANCE = 1e-4
RANK, ALPHA = 16, 32


def window(label: str, seed: int, size: int = 32) -> TrendWindow:
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(5):
        frame = np.full((size, size, 3), COLOURS[label], dtype=np.uint8)
        frame[rng.integers(0, size), :, :] = 128
        frames.append(frame)
    return TrendWindow(frames, [f[::-1].copy() for f in frames], label)


@pytest.fixture(scope="module")
def trained(hub_qwen3_vl, tmp_path_factory):
    """A LoRA (alpha = 2 x rank) trained with the job's defaults (so `full_weights.pt` is written), our service's
    answers for three windows (probabilities, greedy text, reward) and the windows as RLinf's env sees them."""
    from training.kit.family_parts import ModelSpec
    from training.kit.reporting import MemoryReporter
    from training.vlm.rewards import TrendRewardConfig, trend_reward
    from training.vlm.scorer import VLMScorer
    from training.vlm.train import train_vlm
    from training.vlm.wire import WindowRequest

    folder = tmp_path_factory.mktemp("vlm") / "ckpt"
    windows = [window(label, seed=i) for i, label in enumerate(["positive", "negative", "unclear"] * 2)]
    config = VLMTrainConfig(
        base_model_path=str(hub_qwen3_vl),
        lora_rank=RANK,
        lora_alpha=ALPHA,
        lr=5e-3,
        warmup_steps=2,
        max_steps=12,
        batch_size=3,
        grad_accum=1,
        eval_every=12,
        task=TASK,
        device="cpu",
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_vlm(config, windows, windows[:3], folder, reporter=MemoryReporter())
        probe = windows[:3]
        served = VLMScorer(ModelSpec(kind="vlm", folder=folder)).score_windows(
            [WindowRequest(w.images(), generate=True, max_new_tokens=16) for w in probe]
        )
        base = VLMScorer(ModelSpec(kind="vlm", folder=hub_qwen3_vl)).score_windows(
            [WindowRequest(w.images()) for w in probe]
        )
    finally:
        torch.set_num_threads(threads)
    frames = folder.parent / "frames.npy"  # [envs, 2 views, steps, H, W, 3]
    np.save(frames, np.stack([np.stack([np.stack(w.main_frames), np.stack(w.extra_frames)]) for w in probe]))
    return {
        "folder": folder,
        "frames": frames,
        "probabilities": np.array(
            [[r["probabilities"][label] for label in ("positive", "negative", "unclear")] for r in served]
        ),
        "base": np.array([[r["probabilities"][label] for label in ("positive", "negative", "unclear")] for r in base]),
        "labels": [r["parsed"] for r in served],
        "rewards": [trend_reward(r["parsed"], config=TrendRewardConfig()) for r in served],
        "texts": [r["text"] for r in served],
    }


@pytest.fixture(scope="module")
def unscaled(trained, tmp_path_factory):
    """The exported tensors with lora_B as trained (without the adapter's scale): a lora_path RLinf must score
    otherwise, or the comparison could not catch an export that dropped the scale."""
    from training.vlm.rlinf_export import FULL_WEIGHTS

    folder = tmp_path_factory.mktemp("unscaled")
    state = torch.load(trained["folder"] / FULL_WEIGHTS, weights_only=True)
    target = folder / FULL_WEIGHTS
    target.parent.mkdir(parents=True)
    torch.save({key: value / (ALPHA / RANK) if "lora_B" in key else value for key, value in state.items()}, target)
    return folder


@pytest.mark.parametrize("side", ["interop", "interop-peft"])
def test_rlinfs_compute_reward_on_its_history_windows_gives_our_rewards_and_probabilities(
    trained, unscaled, hub_qwen3_vl, side
):
    from training.vlm.rlinf_export import RLINF_LORA_PATH

    ours = trained["probabilities"]
    assert np.abs(ours - trained["base"]).max() > 1e-2, (
        "the adapter should change the scores (else this proves nothing)"
    )
    assert len(set(trained["labels"])) > 1, f"one label for every window ({trained['labels']}) proves little"
    record = json.loads((trained["folder"] / "vlm.json").read_text())["rlinf"]
    assert record["loadable"] and record["scale"] == ALPHA / RANK

    rlinf = side_run(
        "history_vlm_rewards",
        side=side,
        runner="side_rlinf_vlm.py",
        model_path=hub_qwen3_vl,
        lora_paths={"export": trained["folder"] / RLINF_LORA_PATH, "unscaled": unscaled / RLINF_LORA_PATH},
        task=TASK,
        frames=trained["frames"],
    )
    assert (rlinf["peft"] == "0.11.1") == (side == "interop"), rlinf["peft"]
    run = rlinf["runs"]["export"]
    assert run["lora_modules"] > 0 and run["lora_b_abs_sum"] > 0, "RLinf loaded no trained LoRA weights"
    *filling, last = run["steps"]
    # min_history_size 5: the first four steps send no window, and RLinf gives them its interval_reward (0.0)
    assert [step["rewards"] for step in filling] == [[0.0] * 3] * 4
    assert all(step["probabilities"] is None for step in filling)
    theirs = np.array(last["probabilities"])
    assert np.abs(theirs - ours).max() < TOLERANCE, f"RLinf {theirs.round(5)} against served {ours.round(5)}"
    assert last["rewards"] == pytest.approx(trained["rewards"]), (
        f"RLinf generated {last['texts']} -> {last['rewards']}, we {trained['texts']} -> {trained['rewards']}"
    )
    unscaled_probabilities = np.array(rlinf["runs"]["unscaled"]["steps"][-1]["probabilities"])
    assert np.abs(unscaled_probabilities - ours).max() > 10 * TOLERANCE
