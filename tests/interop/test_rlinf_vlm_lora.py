"""RLinf 0.3.0's VLM reward model loads our VLM `full_weights.pt` LoRA and scores as our service does."""

from __future__ import annotations

import numpy as np
import torch

from training.vlm.config import VLMTrainConfig
from training.vlm.data import TrendWindow

from .conftest import side_run

TASK = "Pick up the red cube"
COLOURS = {"positive": (220, 30, 30), "negative": (30, 30, 220), "unclear": (30, 200, 30)}
# the two stacks (transformers 4.57.6 + peft 0.11.1 against 5.24 + 0.21) run different kernels in float32
TOLERANCE = 1e-4


def window(label: str, seed: int, size: int = 32) -> TrendWindow:
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(5):
        frame = np.full((size, size, 3), COLOURS[label], dtype=np.uint8)
        frame[rng.integers(0, size), :, :] = 128
        frames.append(frame)
    return TrendWindow(frames, [f[::-1].copy() for f in frames], label)


def test_rlinf_scores_with_our_trained_lora_as_our_service_does(hub_qwen3_vl, tmp_path):
    from training.kit.family_parts import ModelSpec
    from training.kit.reporting import MemoryReporter
    from training.vlm.scorer import VLMScorer
    from training.vlm.train import train_vlm
    from training.vlm.wire import WindowRequest

    windows = [window(label, seed=i) for i, label in enumerate(["positive", "negative", "unclear"] * 2)]
    config = VLMTrainConfig(
        base_model_path=str(hub_qwen3_vl),
        lr=5e-3,
        warmup_steps=2,
        max_steps=12,
        batch_size=3,
        grad_accum=1,
        eval_every=12,
        task=TASK,
        save_full_weights=True,
        device="cpu",
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_vlm(config, windows, windows[:3], tmp_path / "ckpt", reporter=MemoryReporter())
        scorer = VLMScorer(ModelSpec(kind="vlm", folder=tmp_path / "ckpt"))
        probe = windows[:3]
        served = scorer.score_windows([WindowRequest(w.images()) for w in probe])
        ours = np.array([[r["probabilities"][label] for label in ("positive", "negative", "unclear")] for r in served])
        base = VLMScorer(ModelSpec(kind="vlm", folder=hub_qwen3_vl)).scorer.probabilities(_items(probe, scorer.prompt))
        our_ids = scorer.scorer.encode(_items(probe, scorer.prompt))["input_ids"].tolist()
    finally:
        torch.set_num_threads(threads)
    assert np.abs(ours - base).max() > 1e-2, "the adapter should change the scores (else this test proves nothing)"

    frames = tmp_path / "frames.npy"
    np.save(frames, np.stack([np.stack([np.stack(w.main_frames), np.stack(w.extra_frames)]) for w in probe]))
    rlinf = side_run(
        "vlm_lora_probabilities",
        model_path=hub_qwen3_vl,
        lora_path=tmp_path / "ckpt" / "checkpoints" / "best_model",
        task=TASK,
        frames=frames,
    )
    assert rlinf["valid"] == [0, 1, 2]
    assert rlinf["input_ids"] == our_ids, "RLinf's prompt and video tokens differ from ours"
    assert rlinf["lora_modules"] > 0 and rlinf["lora_b_abs_sum"] > 0, "RLinf loaded no trained LoRA weights"
    theirs = np.array(rlinf["probabilities"])
    assert np.abs(theirs - ours).max() < TOLERANCE, f"RLinf {theirs.round(5)} against served {ours.round(5)}"


def _items(windows: list[TrendWindow], prompt: str):
    from training.vlm.scoring import ScoreItem

    return [ScoreItem(w.images(), prompt) for w in windows]
