"""Paths a job config may name (pretrained weights, a VLM base model), confined to the model folder
(MODEL_DIR). No Django: the folder is passed in.

A path is taken relative to the folder (or absolute), resolved with its symlinks and `..` parts, and refused
when the result is outside; the refusal says the same for every path outside, so it tells nothing about
the file system there (whether a file exists, its type)."""

from __future__ import annotations

from pathlib import Path

MAX_PATH_CHARS = 1000


class PathOutside(ValueError):
    """A path outside the model folder (or unusable); the message names the field, never the file system."""


def confined(value: object, model_dir: Path, *, field: str) -> Path:
    """`value` resolved inside `model_dir` (relative paths are taken from there); PathOutside otherwise."""
    refusal = PathOutside(
        f"{field} must name a path inside the model folder (MODEL_DIR), relative to it, e.g. "
        f"{'qwen3-vl' if 'base_model' in field else 'resnet18.pth'}"
    )
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_PATH_CHARS or "\x00" in value:
        raise refusal
    root = Path(model_dir).resolve()
    candidate = Path(value.strip())  # `~` is a plain name here: nothing expands to a home folder
    try:
        resolved = (root / candidate).resolve()  # an absolute candidate replaces root
    except (OSError, RuntimeError):  # a symlink loop
        raise refusal from None
    if resolved != root and root not in resolved.parents:
        raise refusal
    return resolved


def relative_name(path: Path, model_dir: Path) -> str:
    """How a path inside the model folder is shown to users: relative to the folder."""
    try:
        return str(Path(path).relative_to(Path(model_dir).resolve())) or "."
    except ValueError:
        return Path(path).name
