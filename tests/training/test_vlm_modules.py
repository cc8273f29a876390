"""The plain VLM trend modules: prompt, parser, rewards, config, fixture, data, scoring, LoRA training,
checkpoints, evaluation and the per-stream history buffer (no Django, no worker)."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch

from projects.prompts import DEFAULT_PROMPT_TEMPLATE
from training.vlm.config import VLMTrainConfig
from training.vlm.data import IGNORE_INDEX, TrendWindow, balance_weights, encode_windows, trend_split_load
from training.vlm.evaluation import trend_evaluate
from training.vlm.history import HistoryConfig, WindowHistory
from training.vlm.labels import LABELS
from training.vlm.parse import label_parse
from training.vlm.prompt import prompt_render
from training.vlm.rewards import TrendRewardConfig, trend_reward

COLOURS = {"positive": (220, 30, 30), "negative": (30, 30, 220), "unclear": (30, 200, 30)}


def coloured_window(label: str, size: int = 32, seed: int = 0) -> TrendWindow:
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(5):
        frame = np.full((size, size, 3), COLOURS[label], dtype=np.uint8)
        frame[rng.integers(0, size), :, :] = 128
        frames.append(frame)
    return TrendWindow(frames, [f[::-1].copy() for f in frames], label)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """The tiny model is fastest on one thread (OpenMP spinning hurts on a shared 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny(vlm_fixture_dir):
    from training.vlm.checkpoint import base_load

    model, processor = base_load(vlm_fixture_dir, device="cpu")
    return model, processor


# ---- prompt -----------------------------------------------------------------------------------------


def test_default_prompt_matches_the_project_default():
    from projects.models import Project

    assert Project._meta.get_field("prompt_template").default == DEFAULT_PROMPT_TEMPLATE


def test_prompt_names_task_window_size_and_the_three_words():
    text = prompt_render(None, task="Pick up the red cube", window_size=5)
    assert text.startswith("You are currently performing the task: Pick up the red cube. ")
    assert "5-frame videos" in text and all(label in text for label in LABELS)


def test_prompt_with_an_unknown_field_is_refused():
    with pytest.raises(ValueError, match="unknown fields"):
        prompt_render("Do {thing}", task="x", window_size=5)


# ---- parser and rewards (hand-computed) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("positive", "positive"),
        ("  Negative.", "negative"),
        ("UNCLEAR", "unclear"),
        ('{"trend": "negative", "why": "it is positive"}', "negative"),
        ('Answer: {"trend": "Positive"}', "positive"),
        ('{"trend": "sideways"}', "invalid"),
        ('{"other": 1} so negative', "negative"),
        ("positive at first, then negative", "negative"),
        ("nonpositive positively", "invalid"),
        ("", "invalid"),
        ("I cannot tell", "invalid"),
    ],
)
def test_parser_reads_json_trend_else_the_last_label_word(text, label):
    assert label_parse(text) == label


def test_reward_mapping_defaults_and_success_bonus():
    config = TrendRewardConfig()
    assert trend_reward("positive", config=config) == 1.0
    assert trend_reward("negative", config=config) == -0.2
    assert trend_reward("unclear", config=config) == 0.0
    assert trend_reward("invalid", config=config) == 0.0
    bonus = TrendRewardConfig.from_dict({"gt_success_bonus": 20.0, "label_rewards": {"negative": -1.0}})
    assert trend_reward("positive", config=bonus, env_success=True) == 21.0
    assert trend_reward("negative", config=bonus, env_success=False) == -1.0
    assert trend_reward("invalid", config=bonus, env_success=True) == 20.0


def test_reward_mapping_rejects_unknown_labels():
    with pytest.raises(ValueError, match="unknown labels"):
        TrendRewardConfig.from_dict({"label_rewards": {"sideways": 1.0}})


# ---- config -----------------------------------------------------------------------------------------


def test_config_defaults_follow_the_rlinf_recipe(vlm_fixture_dir):
    config = VLMTrainConfig.from_dict({"base_model_path": str(vlm_fixture_dir)})
    assert (config.lora_rank, config.lora_alpha, config.lr, config.schedule) == (16, 16, 1e-5, "cosine")
    assert (config.warmup_steps, config.max_steps, config.batch_size * config.grad_accum) == (50, 3000, 8)


def test_config_missing_model_folder_is_a_clear_error(tmp_path):
    from training.vlm.config import model_folder_check

    with pytest.raises(ValueError, match="does not exist: download a Qwen3-VL model"):
        model_folder_check(VLMTrainConfig.from_dict({"base_model_path": str(tmp_path / "nope")}).base_model_path)
    with pytest.raises(ValueError, match="no config.json"):
        model_folder_check(str(tmp_path))


def test_config_default_folder_is_model_dir_qwen3_vl(settings):
    assert VLMTrainConfig().base_model_path == str(settings.MODEL_DIR / "qwen3-vl")


def test_config_reports_every_bad_value(vlm_fixture_dir):
    with pytest.raises(ValueError) as err:
        VLMTrainConfig.from_dict(
            {"base_model_path": str(vlm_fixture_dir), "lora_rank": 0, "lr": "fast", "balance": "x", "oops": 1}
        )
    assert "unknown VLM config keys: oops" in str(err.value)
    with pytest.raises(ValueError) as err:
        VLMTrainConfig.from_dict(
            {"base_model_path": str(vlm_fixture_dir), "lora_rank": 0, "lr": "fast", "balance": "x"}
        )
    message = str(err.value)
    assert "lora_rank must be a positive integer" in message
    assert "lr must be a number" in message and "balance must be one of" in message


# ---- fixture, data, scoring -------------------------------------------------------------------------


def test_fixture_is_a_tiny_qwen3_vl_loaded_from_its_folder(tiny, vlm_fixture_dir):
    model, processor = tiny
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert type(processor).__name__ == "Qwen3VLProcessor"
    assert sum(p.numel() for p in model.parameters()) < 400_000
    assert (vlm_fixture_dir / "model.safetensors").stat().st_size < 2_000_000
    for label in LABELS:
        assert len(processor.tokenizer(label, add_special_tokens=False)["input_ids"]) == 1


def test_training_batch_supervises_only_the_answer_tokens(tiny):
    _, processor = tiny
    windows = [coloured_window("positive"), coloured_window("unclear", size=64)]
    batch = encode_windows(processor, windows, "Task: x", with_answers=True, layout="images")
    tokenizer = processor.tokenizer
    for row, window in enumerate(windows):
        supervised = batch["labels"][row][batch["labels"][row] != IGNORE_INDEX].tolist()
        assert tokenizer.decode(supervised) == window.label + "<|im_end|>"
    # left padding: the shorter (32 px) sample starts with pad tokens
    assert batch["attention_mask"][0, 0] == 0 and batch["attention_mask"][1, 0] == 1
    # one image token per merged 2x2 patch group, for all ten images of each window
    image_tokens = int((batch["input_ids"] == processor.image_token_id).sum())
    assert image_tokens == int(batch["image_grid_thw"].prod(dim=1).sum()) // 4
    assert len(batch["image_grid_thw"]) == 20 and "mm_token_type_ids" in batch


def test_balance_weights_give_each_label_the_same_total():
    windows = [coloured_window(label) for label in ["positive"] * 3 + ["negative"] + ["unclear"] * 2]
    weights = balance_weights(windows)
    totals = {label: weights[[w.label == label for w in windows]].sum() for label in LABELS}
    assert np.allclose(list(totals.values()), 2.0) and np.isclose(weights.mean(), 1.0)


def test_batched_label_probabilities_equal_one_at_a_time(tiny):
    from training.vlm.scoring import ScoreItem, TrendScorer

    model, processor = tiny
    scorer = TrendScorer(model, processor, max_batch=8)
    items = [
        ScoreItem(coloured_window(label, size=32 + 16 * i).images(), "Task: x" + " y" * i)
        for i, label in enumerate(LABELS)
    ]
    batched = scorer.probabilities(items)
    single = np.concatenate([scorer.probabilities([item]) for item in items])
    assert batched.shape == (3, 3)
    assert np.allclose(batched.sum(1), 1.0, atol=1e-6)
    assert np.abs(batched - single).max() < 1e-5
    # greedy generation is deterministic and batch-independent
    texts = scorer.generate(items, max_new_tokens=4)
    assert texts == [scorer.generate([item], max_new_tokens=4)[0] for item in items]


# ---- training and checkpoints -----------------------------------------------------------------------


def test_lora_training_lowers_the_loss_and_the_checkpoint_reloads_identically(vlm_fixture_dir, tmp_path):
    from peft import PeftModel

    from training.kit.reporting import MemoryReporter
    from training.vlm.checkpoint import base_load, checkpoint_load, full_weights_load
    from training.vlm.rlinf_export import FULL_WEIGHTS
    from training.vlm.scoring import ScoreItem, TrendScorer
    from training.vlm.train import lora_wrap, train_vlm

    windows = [coloured_window(label, seed=i) for i, label in enumerate(["positive", "negative", "unclear"] * 2)]
    config = VLMTrainConfig(
        base_model_path=str(vlm_fixture_dir),
        lr=5e-3,
        warmup_steps=2,
        max_steps=20,
        batch_size=3,
        grad_accum=1,
        eval_every=10,
        task="Pick up the red cube.",
        save_full_weights=True,
        device="cpu",
    )
    reporter = MemoryReporter()
    result = train_vlm(config, windows, windows[:3], tmp_path / "ckpt", reporter=reporter)
    losses = [point["train_loss"] for point in reporter.steps]
    assert len(losses) == 20 and np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.3
    assert [e["step"] for e in reporter.epochs] == [10, 20]
    assert json.loads((tmp_path / "ckpt" / "vlm.json").read_text())["prompt"].startswith(
        "You are currently performing the task: Pick up"
    )

    prompt = prompt_render(None, task=config.task, window_size=5)
    items = [ScoreItem(w.images(), prompt) for w in windows[:3]]
    trained = np.array(result["evaluation"]["probabilities"])
    model, processor, meta = checkpoint_load(tmp_path / "ckpt", device="cpu")
    assert isinstance(model, PeftModel) and meta["prompt"] == prompt
    reloaded = TrendScorer(model, processor).probabilities(items)
    assert np.abs(reloaded - trained).max() < 1e-5
    base_model, _ = base_load(vlm_fixture_dir, device="cpu")
    base = TrendScorer(base_model, processor).probabilities(items)
    assert np.abs(base - trained).max() > 1e-3  # the adapter changed something

    state = torch.load(tmp_path / "ckpt" / FULL_WEIGHTS, weights_only=True)
    assert state and all("lora_" in key for key in state)
    fresh = lora_wrap(base_load(vlm_fixture_dir, device="cpu")[0], config)
    full_weights_load(fresh, tmp_path / "ckpt" / FULL_WEIGHTS)
    assert np.abs(TrendScorer(fresh.eval(), processor).probabilities(items) - trained).max() < 1e-5


def test_training_stops_when_the_job_is_cancelled(vlm_fixture_dir, tmp_path):
    from training.kit.reporting import JobCancelled, MemoryReporter
    from training.vlm.train import train_vlm

    config = VLMTrainConfig(base_model_path=str(vlm_fixture_dir), max_steps=50, batch_size=1, grad_accum=1)
    reporter = MemoryReporter(cancel_after_steps=2)
    with pytest.raises(JobCancelled):
        train_vlm(config, [coloured_window("positive")], [], tmp_path / "c", reporter=reporter)
    assert len(reporter.steps) == 2 and not (tmp_path / "c" / "vlm.json").exists()


# ---- evaluation -------------------------------------------------------------------------------------


def test_evaluation_counts_and_orders_the_confidently_wrong():
    probs = np.array(
        [
            [0.8, 0.1, 0.1],  # positive -> positive
            [0.6, 0.3, 0.1],  # negative -> positive (0.6)
            [0.1, 0.1, 0.8],  # unclear -> unclear
            [0.05, 0.9, 0.05],  # positive -> negative (0.9)
        ]
    )
    result = trend_evaluate(probs, ["positive", "negative", "unclear", "positive"])
    assert result["confusion"] == [[1, 1, 0], [1, 0, 0], [0, 0, 1]]
    assert result["per_class"]["positive"] == {"precision": 0.5, "recall": 0.5, "support": 2}
    assert result["per_class"]["negative"] == {"precision": 0.0, "recall": 0.0, "support": 1}
    assert result["per_class"]["unclear"] == {"precision": 1.0, "recall": 1.0, "support": 1}
    assert [w["index"] for w in result["wrong"]] == [3, 1]
    assert result["wrong"][0]["predicted"] == "negative" and result["wrong"][0]["confidence"] == 0.9
    assert result["accuracy"] == 0.5


# ---- history buffer ---------------------------------------------------------------------------------


def test_history_scores_after_min_history_every_interval_with_front_padding():
    history = WindowHistory(HistoryConfig(history_size=5, min_history_size=3, input_interval=2))
    frames = [np.full((4, 4, 3), i, dtype=np.uint8) for i in range(9)]
    windows = [history.push(f, f + 100) for f in frames]
    scored = [i for i, w in enumerate(windows) if w is not None]
    assert scored == [2, 4, 6, 8]
    assert [int(f[0, 0, 0]) for f in windows[2].main_frames] == [0, 0, 0, 1, 2]
    assert [int(f[0, 0, 0]) for f in windows[8].extra_frames] == [104, 105, 106, 107, 108]
    history.reset()
    assert history.push(frames[0], frames[0]) is None


def test_history_settings_are_checked():
    with pytest.raises(ValueError, match="min_history_size"):
        HistoryConfig(history_size=3, min_history_size=4)


# ---- reading an exported trend dataset ----------------------------------------------------------------


def _write_window(folder, split, label, sample_id, window):
    pkl = folder / split / "pkl" / f"{label}_{sample_id}.pkl"
    pkl.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "main_frames": window.main_frames,
        "extra_view_frames": window.extra_frames,
        "label": label,
        "score": 0.5,
        "source_episode_path": "ep",
        "start_idx": 0,
        "end_idx": 4,
        "augmentation": None,
    }
    pkl.write_bytes(pickle.dumps(data))
    row = {"task": "t", "prompt": "p", "question": "p", "answer": label, "pkl_path": str(pkl)}
    row["segment_metadata"] = {"start_step": 0, "end_step": 4, "episode_id": "e1"}
    with open(folder / split / "segments.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")


def test_trend_split_load_reads_segments_and_window_pickles(tmp_path):
    window = coloured_window("negative")
    _write_window(tmp_path, "train", "negative", "ep_frames_0000_0004", window)
    windows, rows = trend_split_load(tmp_path, "train")
    assert len(windows) == 1 and windows[0].label == "negative" and rows[0]["answer"] == "negative"
    assert np.array_equal(windows[0].main_frames[2], window.main_frames[2])
    assert windows[0].meta["episode_id"] == "e1"
    assert trend_split_load(tmp_path, "eval") == ([], [])


def test_a_window_pickle_that_runs_code_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (tmp_path / "train" / "pkl").mkdir(parents=True)
    bad = tmp_path / "train" / "pkl" / "positive_x.pkl"
    bad.write_bytes(pickle.dumps({"main_frames": Evil()}))
    (tmp_path / "train" / "segments.jsonl").write_text(json.dumps({"answer": "positive", "pkl_path": str(bad)}))
    with pytest.raises(pickle.UnpicklingError, match="builtins.print"):
        trend_split_load(tmp_path, "train")


# ---- wire format and the worker-side scorer -----------------------------------------------------------


def test_packed_windows_round_trip_and_batch_by_size():
    from training.vlm.wire import BUCKET, WindowRequest, is_packed, pack_windows, unpack_window

    small = WindowRequest(coloured_window("positive").images(), "p", generate=True, max_new_tokens=4)
    other = WindowRequest(coloured_window("negative", size=48).images(), None)
    packed = pack_windows([small, other])
    assert packed.dtype == np.uint8 and packed.shape[1] % BUCKET == 0 and is_packed(packed)
    back = [unpack_window(row) for row in packed]
    assert back[0].prompt == "p" and back[0].generate and back[0].max_new_tokens == 4
    assert back[1].prompt is None and not back[1].generate
    for request, got in zip([small, other], back, strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(request.images, got.images, strict=True))


def test_vlm_scorer_scores_packed_windows_and_live_frames(vlm_fixture_dir, tiny):
    from training.families import scorer_load
    from training.kit.family_parts import ModelSpec
    from training.vlm.scoring import ScoreItem, TrendScorer
    from training.vlm.wire import WindowRequest, pack_windows

    scorer = scorer_load(ModelSpec(kind="vlm", folder=vlm_fixture_dir))
    window = coloured_window("unclear")
    [result] = scorer.score(pack_windows([WindowRequest(window.images(), None, generate=True, max_new_tokens=3)]))
    direct = TrendScorer(*tiny).probabilities([ScoreItem(window.images(), scorer.prompt)])[0]
    assert np.allclose([result["probabilities"][k] for k in LABELS], direct, atol=1e-6)
    assert result["probability"] == result["probabilities"]["positive"]
    assert result["text"] is not None and result["parsed"] == label_parse(result["text"])

    # workers keep no per-stream state: plain frames are refused (live streams send packed windows)
    with pytest.raises(ValueError, match="packed windows"):
        scorer.score(np.stack(window.main_frames))


def test_label_balanced_sampling_draws_each_label_about_equally(vlm_fixture_dir):
    from training.vlm.train import _Batches

    windows = [coloured_window(label) for label in ["positive"] * 8 + ["negative", "unclear"]]
    config = VLMTrainConfig(base_model_path=str(vlm_fixture_dir), balance="sample", batch_size=4)
    batches = _Batches(windows, config)
    drawn = [windows[i].label for _ in range(600) for i in batches.next()]
    shares = {label: drawn.count(label) / len(drawn) for label in LABELS}
    assert all(abs(share - 1 / 3) < 0.05 for share in shares.values()), shares


def test_cosine_schedule_warms_up_then_decays_to_zero(vlm_fixture_dir):
    from training.vlm.train import lr_lambda

    factor = lr_lambda(VLMTrainConfig(base_model_path=str(vlm_fixture_dir), warmup_steps=4, max_steps=104))
    assert [round(factor(s), 2) for s in range(4)] == [0.2, 0.4, 0.6, 0.8]
    assert factor(4) == 1.0 and factor(54) == pytest.approx(0.5) and factor(104) == pytest.approx(0.0)


def test_a_checkpoint_from_another_machine_finds_the_local_base_model(vlm_fixture_dir, tmp_path, settings):
    from training.vlm.checkpoint import base_model_find

    settings.MODEL_DIR = tmp_path
    with pytest.raises(FileNotFoundError, match="is not on this machine"):
        base_model_find({"base_model_path": "/elsewhere/qwen3-vl"})
    (tmp_path / "qwen3-vl").symlink_to(vlm_fixture_dir)
    assert base_model_find({"base_model_path": "/elsewhere/qwen3-vl"}) == str(tmp_path / "qwen3-vl")
    assert base_model_find({"base_model_path": str(vlm_fixture_dir)}) == str(vlm_fixture_dir)


def test_gradient_checkpointing_trains_to_the_same_loss(vlm_fixture_dir, tmp_path):
    from training.kit.reporting import MemoryReporter
    from training.vlm.train import train_vlm

    windows = [coloured_window(label) for label in LABELS]
    losses = []
    for checkpointing in (False, True):
        config = VLMTrainConfig(
            base_model_path=str(vlm_fixture_dir),
            lr=5e-3,
            warmup_steps=0,
            max_steps=3,
            batch_size=3,
            grad_accum=1,
            lora_dropout=0.0,
            gradient_checkpointing=checkpointing,
        )
        reporter = MemoryReporter()
        train_vlm(config, windows, [], tmp_path / str(checkpointing), reporter=reporter)
        losses.append([p["train_loss"] for p in reporter.steps])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4)


def test_fixture_command_writes_a_loadable_model_folder(tmp_path, capsys):
    from training.vlm.checkpoint import checkpoint_meta
    from training.vlm.fixture import main

    main([str(tmp_path / "tiny")])
    assert capsys.readouterr().out.strip() == str(tmp_path / "tiny")
    assert checkpoint_meta(tmp_path / "tiny")["base_model_path"] == str(tmp_path / "tiny")


def test_training_stopped_midway_resumes_from_its_checkpoint_to_the_same_adapter(vlm_fixture_dir, tmp_path):
    from training.kit.reporting import JobCancelled, MemoryReporter
    from training.kit.resume import state_path
    from training.vlm.train import train_vlm

    config = VLMTrainConfig(base_model_path=str(vlm_fixture_dir), max_steps=3, batch_size=1, grad_accum=1, lr=5e-3)
    windows = [coloured_window("positive"), coloured_window("negative")]
    straight = train_vlm(config, windows, [], tmp_path / "a")
    with pytest.raises(JobCancelled):  # stands for the killed worker
        train_vlm(
            config, windows, [], tmp_path / "b", reporter=MemoryReporter(cancel_after_steps=2), checkpoint_seconds=1e-9
        )
    assert state_path(tmp_path / "b").exists()
    reporter = MemoryReporter()
    resumed = train_vlm(config, windows, [], tmp_path / "b", reporter=reporter, resume=True)
    assert reporter.resumed_at == 2 and [p["step"] for p in reporter.steps] == [3]  # not from scratch
    assert resumed["loss_history"] == pytest.approx(straight["loss_history"], abs=1e-5)
    ours = {k: v for k, v in resumed["model"].state_dict().items() if "lora_" in k}
    theirs = straight["model"].state_dict()
    assert ours and all(torch.allclose(v, theirs[k], atol=1e-5) for k, v in ours.items())
