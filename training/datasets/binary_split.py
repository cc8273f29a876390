"""Choosing how a snapshot's labeled frames split into train and val (no Django).

- `episode`: RLinf's simulation preprocessing (`rlinf_binary.split_by_episode`).
- `frame`: RLinf's real-world collection rule (`rlinf_binary.split_by_frame`), with its metadata keys.
- `auto`: by episode when that leaves both classes in both splits; otherwise by frame. So a project of a
  single episode, or of imported `success/` + `failure/` folders only (one all-success and one all-fail
  episode), still gets both classes in train and val.
A frame split puts neighbouring frames of one episode in train and in val, so validation accuracy
overstates how a model does on new episodes: `split_leak` counts the shared episodes and words the warning
that the snapshot's stats, its page and the evaluation page carry.
Frames of an imported RLinf `train.pt` / `val.pt` payload keep the split they came from (`pinned`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .rlinf_binary import SUCCESS, BinaryOptions, BinarySplit, FrameRef, split_by_episode, split_by_frame

SPLITS = ("train", "val")


@dataclass
class SplitPlan:
    split: BinarySplit
    mode: str  # "episode", "frame" or "imported" (every frame pinned by its payload)
    reason: str = ""


def missing_classes(split: BinarySplit) -> list[str]:
    """'<split> has no <class> frames' for every split that lacks a class."""
    out = []
    for name in SPLITS:
        frames = getattr(split, name)
        success = sum(1 for f in frames if f.label == SUCCESS)
        if not success:
            out.append(f"{name} has no success frames")
        if success == len(frames):
            out.append(f"{name} has no fail frames")
    return out


def plan_split(
    episodes: Sequence[Sequence[FrameRef]], options: BinaryOptions, *, mode: str, pinned: dict[str, str]
) -> SplitPlan:
    """Split the episodes' frames; `pinned` maps an episode to the split its frames must stay in."""
    free = [list(ep) for ep in episodes if ep and ep[0].episode not in pinned]
    fixed = [f for ep in episodes if ep and ep[0].episode in pinned for f in ep]
    flat = [f for ep in free for f in ep]
    if not free:
        plan = SplitPlan(BinarySplit(), "imported", "every frame comes from an imported train.pt / val.pt")
    elif mode == "frame":
        plan = SplitPlan(split_by_frame(flat, options), "frame", "asked for")
    elif mode == "episode":
        plan = SplitPlan(split_by_episode(free, options), "episode", "asked for")
    else:
        by_episode = split_by_episode(free, options) if len(free) >= 2 else None
        problems = missing_classes(by_episode) if by_episode is not None else ["only one episode"]
        if by_episode is not None and not problems:
            plan = SplitPlan(by_episode, "episode", "both classes in train and val")
        else:
            plan = SplitPlan(split_by_frame(flat, options), "frame", "by episode: " + "; ".join(problems))
    for ref in fixed:
        name = pinned[ref.episode]
        getattr(plan.split, name).append(ref)
        episodes_of = getattr(plan.split, f"{name}_episodes")
        if ref.episode not in episodes_of:
            episodes_of.append(ref.episode)
    return plan


def shared_episodes(train_episodes: Sequence[str], val_episodes: Sequence[str]) -> list[str]:
    """Episodes with frames in both train and val, in val's order."""
    train = set(train_episodes)
    return [episode for episode in val_episodes if episode in train]


def leak_warning(shared: int, val_episodes: int) -> str:
    """The sentence a page shows when validation shares episodes with training ('' when it does not)."""
    if not shared:
        return ""
    return (
        f"Validation shares {shared} of its {val_episodes} episode(s) with training (split by frame): "
        "neighbouring frames of one episode sit in both, so validation accuracy overstates how the model does "
        "on new episodes. Label both classes in more episodes, or split by episode."
    )


def split_leak(stats: dict) -> tuple[int, str]:
    """(shared episodes, warning) of a snapshot's stats; from its episode lists where older stats lack them."""
    if "shared_episodes" in stats:
        return int(stats["shared_episodes"]), str(stats.get("split_warning", ""))
    val = list(stats.get("val_episodes") or [])
    shared = len(shared_episodes(stats.get("train_episodes") or [], val))
    return shared, leak_warning(shared, len(val))


def payload_split_of(file_name: str) -> str | None:
    """'train' / 'val' for an imported payload named like RLinf's (`train.pt`, `val.pt`), else None."""
    stem = file_name.rsplit("/", 1)[-1].rsplit(".", 1)[0].lower()
    if stem == "train" or stem.endswith(("_train", "-train")):
        return "train"
    if stem in ("val", "eval", "valid", "validation") or stem.endswith(("_val", "-val", "_eval", "-eval")):
        return "val"
    return None
