"""RLinf's binary reward dataset (shared/reference formats section 2): sampling, split and payload.

The split reproduces RLinf's preprocessing step for step (same `random.Random(seed)` call order), so a
project exported here with the same episode order and options gives the same train/val frames. Two
rules: by episode (RLinf's simulation preprocessing) and by frame (RLinf's real-world collection,
`examples/reward/realworld_collect_process_dataset.py`, `_save_pt`: all frames shuffled, validation gets
`max(1, int(n*val_split))` of them, the fail:success ratio thins the train split only, 0 disables it).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SUCCESS, FAIL = 1, 0


@dataclass(frozen=True)
class FrameRef:
    """One labeled frame: where it comes from and its label (1 success, 0 fail); pixels load later."""

    episode: str  # episode uuid
    step: int
    label: int
    image: str = ""  # storage name of the frame file
    source: str = "human"


@dataclass(frozen=True)
class BinaryOptions:
    num_samples_per_episode: int = 0
    keep_last_frame: bool = True
    val_split: float = 0.2
    fail_success_ratio: float = 2.0
    seed: int = 42

    def __post_init__(self) -> None:
        if self.num_samples_per_episode < 0:
            raise ValueError("num_samples_per_episode must be 0 (all frames) or more")
        if not 0.0 < self.val_split < 1.0:
            raise ValueError("val_split must be between 0 and 1 (exclusive)")
        if self.fail_success_ratio < 0:
            raise ValueError("fail_success_ratio must be 0 or more")


@dataclass
class BinarySplit:
    train: list[FrameRef] = field(default_factory=list)
    val: list[FrameRef] = field(default_factory=list)
    train_episodes: list[str] = field(default_factory=list)
    val_episodes: list[str] = field(default_factory=list)
    raw_counts: dict[str, dict[str, int]] = field(default_factory=dict)


def sample_indices(n: int, num_samples_per_episode: int, keep_last_frame: bool) -> list[int]:
    """Indices of the frames kept from an episode of `n` labeled frames (all when 0 or n <= k)."""
    k = num_samples_per_episode
    if k <= 0 or n <= k:
        return list(range(n))
    if k == 1:
        return [n - 1]
    if keep_last_frame:
        # one slot is the last frame; the other k-1 are spread evenly over the earlier frames
        slots, earlier = k - 1, n - 1
        if slots >= earlier:
            head = list(range(earlier))
        elif slots == 1:
            head = [0]
        else:
            head = [int(i * (earlier - 1) / (slots - 1)) for i in range(slots)]
        return sorted(set(head) | {n - 1})
    return sorted({int(i * (n - 1) / (k - 1)) for i in range(k)})


def sample_episode(frames: Sequence[FrameRef], options: BinaryOptions) -> list[FrameRef]:
    return [frames[i] for i in sample_indices(len(frames), options.num_samples_per_episode, options.keep_last_frame)]


def val_episode_count(n_episodes: int, val_split: float) -> int:
    return max(1, int(n_episodes * val_split))


def split_by_episode(episodes: Sequence[Sequence[FrameRef]], options: BinaryOptions) -> BinarySplit:
    """Shuffle episodes, give `max(1, int(n*val_split))` to validation, then per split keep every success
    frame plus `int(n_success * fail_success_ratio)` random fail frames, and shuffle."""
    rng = random.Random(options.seed)
    sampled = [sample_episode(frames, options) for frames in episodes if frames]
    order = list(sampled)
    rng.shuffle(order)
    n_val = val_episode_count(len(order), options.val_split)
    val_eps, train_eps = order[:n_val], order[n_val:]
    result = BinarySplit(
        train_episodes=[ep[0].episode for ep in train_eps],
        val_episodes=[ep[0].episode for ep in val_eps],
    )
    result.train, result.raw_counts["train"] = _balance(train_eps, options.fail_success_ratio, rng)
    result.val, result.raw_counts["val"] = _balance(val_eps, options.fail_success_ratio, rng)
    return result


def split_by_frame(frames: Sequence[FrameRef], options: BinaryOptions) -> BinarySplit:
    """RLinf's real-world rule: success frames then fail frames, shuffled; the first `max(1, int(n *
    val_split))` go to validation; then, when `fail_success_ratio > 0` and train has success frames, train
    keeps its success frames plus `int(n_success * ratio)` randomly chosen fail frames, shuffled."""
    rng = random.Random(options.seed)
    pairs = [f for f in frames if f.label == SUCCESS] + [f for f in frames if f.label != SUCCESS]
    rng.shuffle(pairs)
    n_val = max(1, int(len(pairs) * options.val_split)) if pairs else 0
    val, train = pairs[:n_val], pairs[n_val:]
    result = BinarySplit(val=val)
    result.raw_counts["train"] = _label_counts(train)
    result.raw_counts["val"] = _label_counts(val)
    n_success = result.raw_counts["train"]["success"]
    if options.fail_success_ratio > 0 and n_success > 0:
        fail_at = [i for i, f in enumerate(train) if f.label != SUCCESS]
        rng.shuffle(fail_at)
        fail_keep = set(fail_at[: int(n_success * options.fail_success_ratio)])
        keep = [i for i, f in enumerate(train) if f.label == SUCCESS] + list(fail_keep)
        rng.shuffle(keep)
        train = [train[i] for i in keep]
    result.train = train
    episodes = list(dict.fromkeys(f.episode for f in frames))
    result.train_episodes = [e for e in episodes if any(f.episode == e for f in result.train)]
    result.val_episodes = [e for e in episodes if any(f.episode == e for f in result.val)]
    return result


def _label_counts(frames: Sequence[FrameRef]) -> dict[str, int]:
    success = sum(1 for f in frames if f.label == SUCCESS)
    return {"success": success, "fail": len(frames) - success}


def realworld_metadata(frames: Sequence[FrameRef], options: BinaryOptions, *, num_train: int, num_val: int) -> dict:
    """The metadata keys RLinf's real-world collection writes with a frame-split payload, in its order."""
    success = sum(1 for f in frames if f.label == SUCCESS)
    return {
        "num_success_frames": success,
        "num_fail_frames": len(frames) - success,
        "total_frames": len(frames),
        "val_split": options.val_split,
        "fail_success_ratio": options.fail_success_ratio,
        "random_seed": options.seed,
        "num_train_samples": num_train,
        "num_val_samples": num_val,
    }


def _balance(episodes: list[list[FrameRef]], ratio: float, rng: random.Random) -> tuple[list[FrameRef], dict[str, int]]:
    success = [f for ep in episodes for f in ep if f.label == SUCCESS]
    fail = [f for ep in episodes for f in ep if f.label != SUCCESS]
    counts = {"success": len(success), "fail": len(fail)}
    if not success:
        return [], counts
    rng.shuffle(fail)
    fail = fail[: int(len(success) * ratio)]
    pairs = success + fail
    rng.shuffle(pairs)
    return pairs, counts


def payload_metadata(options: BinaryOptions, *, raw_data_path: str, num_train: int, num_val: int) -> dict[str, Any]:
    """The metadata keys RLinf's simulation path writes, in its order."""
    return {
        "raw_data_path": raw_data_path,
        "num_samples_per_episode": options.num_samples_per_episode,
        "keep_last_frame": options.keep_last_frame,
        "val_split": options.val_split,
        "fail_success_ratio": options.fail_success_ratio,
        "random_seed": options.seed,
        "num_train_samples": num_train,
        "num_val_samples": num_val,
    }


def write_payload(
    path: str | Path, frames: Sequence[FrameRef], load: Callable[[FrameRef], np.ndarray], metadata: dict[str, Any]
) -> None:
    """`torch.save({"images": [uint8 HxWx3 tensors], "labels": [1/0], "metadata": ...})` as RLinf reads it.

    Each frame is appended to a scratch file next to `path` as soon as it is loaded, and the payload is
    saved from a memory map of that file (the images are views of one storage), so a build holds one
    decoded frame at a time, not the split: a project's frames need not fit in memory."""
    import torch  # here, not at the top: the web process's pages import this module's frame references

    path = Path(path)
    scratch = path.with_name(f"{path.name}.frames")
    shapes = []
    try:
        with scratch.open("wb") as out:
            for ref in frames:
                array = load(ref)
                if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
                    raise ValueError(f"frame {ref.episode}#{ref.step} is not uint8 HxWx3")
                out.write(np.ascontiguousarray(array).data)
                shapes.append(array.shape)
        images = []
        if shapes:
            flat = torch.from_file(str(scratch), shared=True, size=scratch.stat().st_size, dtype=torch.uint8)
            offset = 0
            for shape in shapes:
                count = shape[0] * shape[1] * shape[2]
                images.append(flat[offset : offset + count].view(shape))
                offset += count
        payload = {"images": images, "labels": [int(ref.label) for ref in frames], "metadata": metadata}
        torch.save(payload, str(path))
    finally:
        scratch.unlink(missing_ok=True)


def read_payload(path: str | Path, *, mmap: bool = False) -> dict[str, Any]:
    """A payload written by us (or RLinf) read without unpickling code: tensors, lists, dicts, scalars only.
    With `mmap`, its tensors are mapped from the file rather than read into memory (torch.save's zip format)."""
    import torch

    return torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
