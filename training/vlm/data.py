"""Trend windows -> Qwen3-VL processor inputs.

A window is the same steps seen from two cameras, kept as one flat list (main view's frames, then the
extra view's). The model's input layout (`training.vlm.layout`) decides how the processor sees it: two
videos (RLinf's SFT and local reward worker format, the default) or separate images. Training
batches supervise only the answer tokens (label + end of turn); every batch is left padded so position -1
is each sample's last prompt token, which is what one-forward label scoring reads.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .labels import LABELS
from .layout import DEFAULT_LAYOUT, IMAGES, layout_check, video_metadata, video_user_content, window_videos

IGNORE_INDEX = -100


@dataclass
class TrendWindow:
    main_frames: list[np.ndarray]
    extra_frames: list[np.ndarray]
    label: str | None = None
    meta: dict = field(default_factory=dict)

    def images(self) -> list[np.ndarray]:
        return [*self.main_frames, *self.extra_frames]


def window_check(window: TrendWindow) -> None:
    if not window.main_frames or not window.extra_frames:
        raise ValueError("a window needs frames from both views")
    for frame in window.images():
        if not (isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3):
            raise ValueError("window frames must be uint8 arrays [H, W, 3]")
    if window.label is not None and window.label not in LABELS:
        raise ValueError(f"unknown label {window.label!r}; expected one of {', '.join(LABELS)}")


def window_messages(n_images: int, prompt: str) -> list[dict]:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": prompt}]
    return [{"role": "user", "content": content}]


def prompt_text(processor, n_images: int, prompt: str, layout: str = IMAGES) -> str:
    """The chat-formatted prompt up to and including the assistant turn's opening."""
    if layout == IMAGES:
        messages = window_messages(n_images, prompt)
    else:
        messages = [{"role": "user", "content": video_user_content(processor, prompt)}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def answer_suffix(processor) -> str:
    return processor.tokenizer.eos_token or "<|im_end|>"


def _size(min_pixels: int | None, max_pixels: int | None) -> dict:
    size = {}
    if min_pixels is not None:
        size["shortest_edge"] = min_pixels
    if max_pixels is not None:
        size["longest_edge"] = max_pixels
    return {"size": size} if size else {}


def processor_media(
    processor, image_lists: list[list[np.ndarray]], layout: str, min_pixels: int | None, max_pixels: int | None
) -> dict:
    """The processor's media arguments for flat windows in `layout`."""
    size = _size(min_pixels, max_pixels)
    if layout == IMAGES:
        return {"images": [list(images) for images in image_lists], **({"images_kwargs": size} if size else {})}
    videos = [window_videos(images) for images in image_lists]
    metadata = [video_metadata(pair) for pair in videos]
    return {"videos": videos, "videos_kwargs": {"video_metadata": metadata, **size}}


def encode_images(
    processor,
    image_lists: list[list[np.ndarray]],
    prompts: list[str],
    *,
    answers: list[str] | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    layout: str = DEFAULT_LAYOUT,
):
    """Left-padded processor inputs, one chat per flat window (main frames then extra frames) in the
    model's `layout`; with answers, `labels` masks all but them."""
    layout_check(layout)
    if len(image_lists) != len(prompts) or (answers is not None and len(answers) != len(prompts)):
        raise ValueError("image_lists, prompts and answers must have the same length")
    texts = []
    answer_ids = []
    for i, (images, prompt) in enumerate(zip(image_lists, prompts, strict=True)):
        text = prompt_text(processor, len(images), prompt, layout)
        if answers is not None:
            answer = answers[i] + answer_suffix(processor)
            answer_ids.append(processor.tokenizer(answer, add_special_tokens=False)["input_ids"])
            text += answer
        texts.append(text)
    batch = processor(
        text=texts,
        padding=True,
        padding_side="left",
        return_tensors="pt",
        **processor_media(processor, image_lists, layout, min_pixels, max_pixels),
    )
    if answers is not None:
        labels = batch["input_ids"].clone()
        labels[:] = IGNORE_INDEX
        for row, ids in enumerate(answer_ids):
            n = len(ids)
            if batch["input_ids"][row, -n:].tolist() != ids:
                raise ValueError("the answer tokenizes differently inside the chat text; cannot mask it")
            labels[row, -n:] = batch["input_ids"][row, -n:]
        batch["labels"] = labels
    return batch


def encode_windows(
    processor,
    windows: list[TrendWindow],
    prompt: str,
    *,
    with_answers: bool = False,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    layout: str = DEFAULT_LAYOUT,
):
    """Processor inputs for trend windows (all with the same prompt); answers are the windows' labels."""
    answers = None
    if with_answers:
        if any(window.label is None for window in windows):
            raise ValueError("training windows need a label")
        answers = [window.label for window in windows if window.label is not None]
    return encode_images(
        processor,
        [window.images() for window in windows],
        [prompt] * len(windows),
        answers=answers,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        layout=layout,
    )


def label_counts(windows: list[TrendWindow]) -> dict[str, int]:
    counts = Counter(window.label for window in windows)
    return {label: counts.get(label, 0) for label in LABELS}


def balance_weights(windows: list[TrendWindow]) -> np.ndarray:
    """Per-window weights that give every present label the same total weight (mean weight 1)."""
    counts = label_counts(windows)
    present = [label for label in LABELS if counts[label]]
    if not present:
        return np.ones(len(windows))
    per_label: dict[str | None, float] = {label: len(windows) / (len(present) * counts[label]) for label in present}
    return np.array([per_label[window.label] for window in windows], dtype=np.float64)


# ---- reading an exported trend dataset folder (formats.md section 4) ----

_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("builtins", "bytearray"),
}


class _WindowUnpickler(pickle.Unpickler):
    """Admits only numpy arrays and plain containers: a window pkl that tries to run code is refused."""

    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"window pickle refers to {module}.{name}, which is not allowed")


def window_pkl_load(path: str | Path) -> dict:
    with open(path, "rb") as fh:
        data = _WindowUnpickler(fh).load()
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a window pickle must hold a dict")
    return data


def _frames(values) -> list[np.ndarray]:
    return [np.ascontiguousarray(np.asarray(frame, dtype=np.uint8)) for frame in values]


def window_pkl_resolve(folder: Path, split: str, pkl_path: str) -> Path:
    """A row's window pickle: an existing absolute path as written (RLinf writes those), a path relative to
    the trend folder (what we write), else the same file name under `<split>/pkl/` (a moved folder)."""
    path = Path(pkl_path)
    if path.is_absolute() and path.is_file():
        return path
    if not path.is_absolute() and (folder / path).is_file():
        return folder / path
    return folder / split / "pkl" / path.name


def trend_split_load(folder: str | Path, split: str) -> tuple[list[TrendWindow], list[dict]]:
    """Windows and JSONL rows of `train` or `eval` in an exported trend dataset folder."""
    folder = Path(folder)
    manifest = folder / split / "segments.jsonl"
    windows: list[TrendWindow] = []
    rows: list[dict] = []
    if not manifest.is_file():
        return windows, rows
    for line in manifest.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        pkl_path = window_pkl_resolve(folder, split, row["pkl_path"])
        data = window_pkl_load(pkl_path)
        window = TrendWindow(
            main_frames=_frames(data["main_frames"]),
            extra_frames=_frames(data["extra_view_frames"]),
            label=row["answer"],
            meta=dict(row.get("segment_metadata") or {}),
        )
        window_check(window)
        windows.append(window)
        rows.append(row)
    return windows, rows
