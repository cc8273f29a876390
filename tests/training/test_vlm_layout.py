"""A VLM trend window encoded exactly as RLinf encodes it: two videos (main, then extra view) through the
processor's video path, the same for training and for serving (no Django, no worker).

Spec: `rlinf/data/datasets/vlm/vlm_trend_reward.py` (`VLMTrendRewardSFTDataset._build_video_user_content`
builds `"<|video_pad|>\\n<|video_pad|>\\n\\n" + prompt`; `process_inputs` renders it with
`apply_chat_template(..., add_generation_prompt=True)` and calls the processor with `videos=[main, extra]`
and `video_metadata` `{"total_num_frames": len(video), "fps": 24.0}` per video), and
`rlinf/models/embodiment/reward/vlm_reward_utils/input_builder.py` (`VLMTrendRewardInputBuilder`: video
keys `main_images` then `extra_view_images`, the fixed prompt, `process_inputs` through the same function).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from projects.prompts import RLINF_TREND_PROMPT_TEMPLATE
from training.vlm.data import TrendWindow, encode_windows
from training.vlm.layout import layout_of, window_videos
from training.vlm.prompt import prompt_render
from training.vlm.scoring import ScoreItem, TrendScorer


def window(seed: int, size: int = 32, label: str | None = "positive") -> TrendWindow:
    rng = np.random.default_rng(seed)
    main = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(5)]
    extra = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(5)]
    return TrendWindow(main, extra, label)


def rlinf_inputs(processor, prompt: str, main, extra):
    """Processor inputs written from RLinf's reading of a window (vlm_trend_reward.py, process_inputs with
    answer_text None, single sample): our own test code mirroring its steps."""
    token = getattr(processor, "video_token", "<|video_pad|>")
    user = f"{token}\n{token}\n\n{prompt}"
    text = processor.apply_chat_template(
        [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
    )
    videos = [main, extra]
    meta = [{"total_num_frames": len(v), "fps": 24.0} for v in videos]
    return processor(
        text=[text], videos=videos, return_tensors="pt", padding=True, videos_kwargs={"video_metadata": meta}
    )


@pytest.fixture(scope="module")
def tiny(vlm_fixture_dir):
    from training.vlm.checkpoint import base_load

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, processor = base_load(vlm_fixture_dir, device="cpu")
    yield model, processor
    torch.set_num_threads(threads)


def test_the_default_prompt_is_rlinfs_fixed_trend_prompt():
    """input_builder.py, VLMTrendRewardInputBuilder.prepare_inputs: the text RLinf's local worker sends."""
    text = prompt_render(None, task="pick up the cube", window_size=5)
    assert text == (
        "You are currently performing the task: pick up the cube. You are given two synchronized 5-frame videos "
        "from different camera views (main view and third-person view) of the same robot action window. Judge "
        "whether the action trend is positive, negative, or unclear. Answer with exactly one word: positive, "
        "negative, or unclear."
    )
    assert prompt_render(RLINF_TREND_PROMPT_TEMPLATE, task="x", window_size=8) == prompt_render(
        None, task="x", window_size=8
    )


def test_serving_encodes_a_video_window_exactly_as_rlinf_does(tiny):
    model, processor = tiny
    w = window(1)
    prompt = prompt_render(None, task="pick up the cube", window_size=5)
    ours = TrendScorer(model, processor).encode([ScoreItem(w.images(), prompt)])
    theirs = rlinf_inputs(processor, prompt, w.main_frames, w.extra_frames)
    assert set(ours) == set(theirs)
    for key in theirs:
        assert torch.equal(ours[key], theirs[key]), key
    assert "pixel_values_videos" in ours and "pixel_values" not in ours
    assert len(ours["video_grid_thw"]) == 2  # two videos: main, then extra
    assert processor.tokenizer.decode(ours["input_ids"][0]).count("<|vision_start|>") >= 2


def test_training_and_serving_encode_a_window_the_same_way(tiny):
    """The training batch is the serving input plus the answer tokens; its media are identical."""
    model, processor = tiny
    windows = [window(2), window(3, size=64, label="negative")]
    prompt = prompt_render(None, task="t", window_size=5)
    train = encode_windows(processor, windows, prompt, with_answers=True)
    scorer = TrendScorer(model, processor)
    for row, w in enumerate(windows):
        served = scorer.encode([ScoreItem(w.images(), prompt)])
        single = encode_windows(processor, [w], prompt, with_answers=True)
        n = served["input_ids"].shape[1]
        assert torch.equal(single["input_ids"][0, :n], served["input_ids"][0])
        assert torch.equal(single["pixel_values_videos"], served["pixel_values_videos"])
        assert torch.equal(single["video_grid_thw"], served["video_grid_thw"])
        answer = single["input_ids"][0, n:].tolist()
        assert processor.tokenizer.decode(answer) == w.label + "<|im_end|>"
        # in the padded batch, the row ends with the same tokens
        assert train["input_ids"][row, -single["input_ids"].shape[1] :].tolist() == single["input_ids"][0].tolist()


def test_video_and_images_layouts_differ_and_both_score(tiny):
    model, processor = tiny
    w = window(4)
    prompt = "Judge."
    video = TrendScorer(model, processor, layout="video")
    images = TrendScorer(model, processor, layout="images")
    assert "pixel_values" in images.encode([ScoreItem(w.images(), prompt)])
    pv, pi = video.probabilities([ScoreItem(w.images(), prompt)]), images.probabilities([ScoreItem(w.images(), prompt)])
    assert pv.shape == pi.shape == (1, 3) and np.allclose(pv.sum(), 1) and not np.allclose(pv, pi)


def test_a_window_splits_into_its_two_videos_and_odd_counts_are_refused():
    frames = [np.full((2, 2, 3), i, dtype=np.uint8) for i in range(10)]
    main, extra = window_videos(frames)
    assert [int(f[0, 0, 0]) for f in main] == [0, 1, 2, 3, 4]
    assert [int(f[0, 0, 0]) for f in extra] == [5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="same number of frames"):
        window_videos(frames[:9])


def test_layout_recorded_by_a_checkpoint():
    assert layout_of({"input_layout": "images"}) == "images"
    assert layout_of({"config": {"input_layout": "video"}, "step": 3}) == "video"
    # a checkpoint trained before layouts existed was trained on separate images
    assert layout_of({"config": {"lr": 1e-5}, "step": 3}) == "images"
    # a bare base model folder: the default, RLinf's videos
    assert layout_of({"kind": "vlm", "base_model_path": "/m"}) == "video"
    with pytest.raises(ValueError, match="input_layout"):
        layout_of({"input_layout": "frames"})


def test_lora_defaults_follow_rlinf():
    """rlinf/models/__init__.py (LoraConfig: lora_alpha=lora_rank, dropout 0.0, gaussian init, targets over
    vision, projector, LLM, lm_head) and qwen3vl_sft_vlm_trend_reward.yaml (weight_decay 0.01,
    sample_reweight enabled)."""
    from training.vlm.config import VLMTrainConfig

    config = VLMTrainConfig(base_model_path="/nowhere", lora_rank=8)
    assert config.lora_alpha == 8 and config.lora_dropout == 0.0 and config.lora_init == "gaussian"
    assert config.weight_decay == 0.01 and config.balance == "weight" and config.input_layout == "video"
    assert {"qkv", "proj", "q_proj", "down_proj", "lm_head"} <= set(config.target_modules)
    assert VLMTrainConfig(base_model_path="/n", lora_alpha=32).lora_alpha == 32
    with pytest.raises(ValueError, match="input_layout"):
        VLMTrainConfig(base_model_path="/n", input_layout="frames")


def test_lora_wraps_vision_projector_language_model_and_lm_head(tiny, vlm_fixture_dir):
    from training.vlm.checkpoint import base_load
    from training.vlm.config import VLMTrainConfig
    from training.vlm.train import lora_wrap

    model, _ = base_load(vlm_fixture_dir, device="cpu")
    wrapped = lora_wrap(model, VLMTrainConfig(base_model_path=str(vlm_fixture_dir)))
    names = [n for n, _ in wrapped.named_modules() if n.endswith("lora_A")]
    assert any(".visual.blocks." in n and ".attn.qkv" in n for n in names)
    assert any(".language_model." in n and "q_proj" in n for n in names)
    assert any("lm_head" in n for n in names)
