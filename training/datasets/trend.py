"""RLinf's VLM trend dataset (shared/reference formats section 4): windows, split, files.

Output folder: `dataset_info.json`, `train|eval/segments.jsonl`, `train|eval/pkl/<label>_<sample_id>.pkl`.
Window pickles hold only numpy arrays and plain values, so they load with a restricted unpickler.

Written as RLinf's preprocessing writes it (`examples/reward/preprocess_vlm_trend_reward_dataset.py`):
its key names (`balance_labels`, `reverse_positive_as_negative`, `random_seed`, `keep_last_window`, ...),
its row and pickle fields, reversed positives named `<sample_id>_reverse_negative` with augmentation
`reverse_positive` and score `-|score|`, its balancing (each label shuffled, all cut to the smallest
non-empty count). One difference, on purpose: `pkl_path` and the manifests are relative to the trend
folder, which RLinf's loader (`_resolve_video_path` in `rlinf/data/datasets/vlm/vlm_trend_reward.py`)
joins onto `data.data_root`, so an unpacked download resolves wherever it lies.
"""

from __future__ import annotations

import json
import pickle
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

LABELS = ("positive", "negative", "unclear")
SPLITS = ("train", "eval")
# RLinf's names for the two views and for the score a window's label comes from
RLINF_VIEWS = ["main_images", "extra_view_images[0]"]
SCORE_NAME = "gae_delta_window"


@dataclass(frozen=True)
class WindowRef:
    """One labeled window of steps start..end (inclusive) with the frame names of both views."""

    episode: str  # episode uuid
    episode_stem: str  # RLinf's episode file stem, or a stand-in built from the uuid
    start: int
    end: int
    label: str
    main_images: tuple[str, ...]
    extra_images: tuple[str, ...]
    source: str = "human"
    start_score: float | None = None
    end_score: float | None = None
    episode_id: int | None = None
    env_idx: int | None = None
    success: bool | None = None
    augmentation: str = "none"

    @property
    def sample_id(self) -> str:
        suffix = "_reverse_negative" if self.augmentation == "reverse" else ""
        return f"{self.episode_stem}_frames_{self.start:04d}_{self.end:04d}{suffix}"

    @property
    def rlinf_augmentation(self) -> str | None:
        return "reverse_positive" if self.augmentation == "reverse" else None

    @property
    def score(self) -> float | None:
        if self.start_score is None or self.end_score is None:
            return None
        delta = self.end_score - self.start_score
        return -abs(delta) if self.augmentation == "reverse" else delta


@dataclass(frozen=True)
class TrendOptions:
    window_size: int = 5
    stride: int = 1
    delta_threshold: float = 0.05
    tail_unclear_ratio: float = 0.15
    val_split: float = 0.1
    balance: bool = True
    reverse_positive_augmentation: bool = True
    seed: int = 42
    score_name: str = "gae"
    views: tuple[str, str] = ("main", "extra")

    def __post_init__(self) -> None:
        if not 0.0 <= self.val_split < 1.0:
            raise ValueError("trend val_split must be in [0, 1)")


@dataclass
class TrendSplit:
    train: list[WindowRef] = field(default_factory=list)
    eval: list[WindowRef] = field(default_factory=list)
    train_episodes: list[str] = field(default_factory=list)
    eval_episodes: list[str] = field(default_factory=list)


def reversed_negative(window: WindowRef) -> WindowRef:
    """A positive window played backwards: progress undone, so a negative."""
    return replace(
        window,
        label="negative",
        main_images=tuple(reversed(window.main_images)),
        extra_images=tuple(reversed(window.extra_images)),
        augmentation="reverse",
    )


def split_windows(windows: Sequence[WindowRef], options: TrendOptions) -> TrendSplit:
    """Split by episode (shuffled with the seed; eval gets max(1, int(n*val_split)) episodes when there are
    two or more), then build each split as RLinf's `balance_and_split_by_episode` does, in its order: the
    split's episodes in their shuffled order, each positive window followed in the negative group by its
    reversed copy, each label's group shuffled, cut to the smallest present group when balancing, and all
    shuffled together. The same seed keeps the same windows as RLinf's script."""
    rng = random.Random(options.seed)
    usable = [w for w in windows if w.main_images and w.extra_images and w.label in LABELS]
    episodes = sorted({w.episode for w in usable}, key=[w.episode for w in usable].index)
    rng.shuffle(episodes)
    n_eval = max(1, int(len(episodes) * options.val_split)) if len(episodes) >= 2 and options.val_split > 0 else 0
    result = TrendSplit(train_episodes=episodes[n_eval:], eval_episodes=episodes[:n_eval])
    by_episode: dict[str, list[WindowRef]] = {}
    for w in usable:
        by_episode.setdefault(w.episode, []).append(w)
    for name, split_episodes in (("train", result.train_episodes), ("eval", result.eval_episodes)):
        chosen = [w for episode in split_episodes for w in by_episode[episode]]
        setattr(result, name, _extract_and_sample(chosen, options, rng))
    return result


def eval_warning(split: TrendSplit, options: TrendOptions) -> str:
    """Why the evaluation split is empty when one was asked for (empty string otherwise): it needs two
    episodes with windows, since an episode never sits in both splits."""
    if split.eval or options.val_split <= 0:
        return ""
    episodes = len(split.train_episodes) + len(split.eval_episodes)
    return (
        f"The trend evaluation split is empty: {episodes} episode(s) with windows, and it needs 2 (an episode is "
        "never in both splits; RLinf's script would put the only one in eval and train on nothing). A VLM model "
        "trained on this snapshot trains on every window and gets no evaluation: record or label another episode."
    )


def _extract_and_sample(windows: list[WindowRef], options: TrendOptions, rng: random.Random) -> list[WindowRef]:
    groups: dict[str, list[WindowRef]] = {label: [] for label in LABELS}
    for w in windows:
        groups[w.label].append(w)
        if options.reverse_positive_augmentation and w.label == "positive":
            groups["negative"].append(reversed_negative(w))
    for group in groups.values():
        rng.shuffle(group)
    present = [len(group) for group in groups.values() if group]
    if options.balance and len(present) >= 2:
        groups = {label: group[: min(present)] for label, group in groups.items() if group}
    merged = [w for group in groups.values() for w in group]
    rng.shuffle(merged)
    return merged


def label_counts(windows: Sequence[WindowRef]) -> dict[str, int]:
    counts = Counter(w.label for w in windows)
    return {label: counts.get(label, 0) for label in LABELS}


def messages(prompt: str, label: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "text", "text": prompt}]},
        {"role": "assistant", "content": [{"type": "text", "text": label}]},
    ]


def segment_row(window: WindowRef, *, pkl_path: str, prompt: str, task: str, options: TrendOptions) -> dict:
    """One `segments.jsonl` row; `pkl_path` relative to the trend folder."""
    return {
        "task": task,
        "prompt": prompt,
        "question": prompt,
        "answer": window.label,
        "pkl_path": pkl_path,
        "messages": messages(prompt, window.label),
        "source_episode_path": window.episode_stem,
        "segment_metadata": {
            "start_step": window.start,
            "end_step": window.end,
            "window_size": options.window_size,
            "episode_id": window.episode_id,
            "env_idx": window.env_idx,
            "success": window.success,
            "augmentation": window.rlinf_augmentation,
            "views": list(RLINF_VIEWS),
        },
        "supervision": {
            "label": window.label,
            "score": window.score,
            "score_name": SCORE_NAME,
            "score_source": options.score_name,
            "delta_threshold": options.delta_threshold,
            "start_gae": window.start_score,
            "end_gae": window.end_score,
        },
    }


def rlinf_dataset_info(options: TrendOptions, *, task: str) -> dict[str, Any]:
    """The preprocessing parameters under RLinf's `dataset_info.json` names (the counts come later)."""
    return {
        "raw_data_path": "",
        "output_dir": ".",
        "window_size": options.window_size,
        "stride": options.stride,
        "delta_threshold": options.delta_threshold,
        "tail_unclear_ratio": options.tail_unclear_ratio,
        "num_samples_per_episode": 0,
        "keep_last_window": True,
        "val_split": options.val_split,
        "balance_labels": options.balance,
        "max_samples_per_label": None,
        "eval_max_samples_per_label": None,
        "reverse_positive_as_negative": options.reverse_positive_augmentation,
        "fps": 2,
        "task_description": task,
        "random_seed": options.seed,
        "export_format": "pkl",
        "score_source": options.score_name,
        "views": list(RLINF_VIEWS),
        "cameras": list(options.views),
    }


def write_trend_dataset(
    folder: str | Path,
    split: TrendSplit,
    *,
    load: Callable[[str], np.ndarray],
    prompt: str,
    task: str,
    options: TrendOptions,
    extra_info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the folder and return dataset_info (also written as dataset_info.json, RLinf's keys first)."""
    folder = Path(folder)
    info: dict[str, Any] = rlinf_dataset_info(options, task=task)
    info.update(extra_info or {})
    for name in SPLITS:
        windows: list[WindowRef] = getattr(split, name)
        pkl_dir = folder / name / "pkl"
        pkl_dir.mkdir(parents=True, exist_ok=True)
        manifest = folder / name / "segments.jsonl"
        with manifest.open("w") as out:
            for window in windows:
                pkl_path = pkl_dir / f"{window.label}_{window.sample_id}.pkl"
                data = {
                    "main_frames": [load(n) for n in window.main_images],
                    "extra_view_frames": [load(n) for n in window.extra_images],
                    "label": window.label,
                    "score": window.score,
                    "source_episode_path": window.episode_stem,
                    "start_idx": window.start,
                    "end_idx": window.end,
                    "augmentation": window.rlinf_augmentation,
                }
                with pkl_path.open("wb") as fh:
                    pickle.dump(data, fh, protocol=4)
                relative = pkl_path.relative_to(folder).as_posix()
                row = segment_row(window, pkl_path=relative, prompt=prompt, task=task, options=options)
                out.write(json.dumps(row) + "\n")
        info[f"num_{name}_samples"] = len(windows)
        info[f"{name}_label_counts"] = label_counts(windows)
        info[f"{name}_manifest"] = manifest.relative_to(folder).as_posix()
    info["train_episodes"] = split.train_episodes
    info["eval_episodes"] = split.eval_episodes
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2))
    return info
