"""Self-describing checkpoints: weights RLinf can load, the config that rebuilds the model, metrics.

A checkpoint folder holds `model.safetensors` (flat state dict, `backbone.*` keys), `config.json` (the
ResNetConfig plus `model_type` and `step`) and `metrics.json`. With `rlinf_layout=True` the same weights
are also written to `actor/model_state_dict/full_weights.pt` under the folder, as RLinf's trainer does.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from .config import ResNetConfig
from .model import RewardResNet, predict_proba

MODEL_TYPE = "rlinf_resnet_reward"
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"
RLINF_WEIGHTS = Path("actor") / "model_state_dict" / "full_weights.pt"
CHECKPOINT_FILES = [WEIGHTS_FILE, CONFIG_FILE, METRICS_FILE]

__all__ = ["load_checkpoint", "predict_proba", "save_checkpoint", "save_rlinf_weights", "state_dict_for_rlinf"]


def state_dict_for_rlinf(model: RewardResNet) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}


def save_checkpoint(
    model: RewardResNet,
    config: ResNetConfig,
    folder: str | os.PathLike,
    *,
    metrics: dict[str, Any],
    step: int,
    rlinf_layout: bool = False,
) -> Path:
    """Write the checkpoint atomically enough: each file goes to a temporary name, then is renamed."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = state_dict_for_rlinf(model)
    _write(folder / WEIGHTS_FILE, lambda tmp: save_file(state, str(tmp), metadata={"format": "pt"}))
    meta = {"model_type": MODEL_TYPE, "step": int(step), **config.to_dict()}
    _write(folder / CONFIG_FILE, lambda tmp: tmp.write_text(json.dumps(meta, indent=2)))
    _write(folder / METRICS_FILE, lambda tmp: tmp.write_text(json.dumps({"step": int(step), **metrics}, indent=2)))
    if rlinf_layout:
        save_rlinf_weights(model, folder)
    return folder


def save_rlinf_weights(model: RewardResNet, folder: str | os.PathLike) -> Path:
    """`<folder>/actor/model_state_dict/full_weights.pt` (a torch.save'd flat state dict), as RLinf's trainer writes."""
    target = Path(folder) / RLINF_WEIGHTS
    target.parent.mkdir(parents=True, exist_ok=True)
    state = state_dict_for_rlinf(model)
    _write(target, lambda tmp: torch.save(state, tmp))
    return target


def copy_checkpoint_files(source: str | os.PathLike, folder: str | os.PathLike, names: Sequence[Path | str]) -> Path:
    """Give `folder` the same files as `source` (a checkpoint written moments ago from the same weights), by
    hard link where the file system allows, else by copy; each lands under a temporary name, then is renamed."""
    source, folder = Path(source), Path(folder)
    for name in names:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        _write(target, lambda tmp, name=name: _link_or_copy(source / name, tmp))
    return folder


def _link_or_copy(source: Path, target: Path) -> None:
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def load_checkpoint(folder: str | os.PathLike, device: str = "cpu") -> tuple[RewardResNet, ResNetConfig]:
    """The model (eval mode, on `device`) rebuilt from the folder's config.json, weights loaded strictly."""
    folder = Path(folder)
    data = json.loads((folder / CONFIG_FILE).read_text())
    model_type = data.get("model_type", MODEL_TYPE)
    if model_type != MODEL_TYPE:
        raise ValueError(f"{folder} holds a {model_type!r} checkpoint, not a ResNet reward model")
    config = ResNetConfig.from_dict(data)
    model = RewardResNet(config)
    model.load_state_dict(load_file(str(folder / WEIGHTS_FILE), device="cpu"), strict=True)
    return model.to(device).eval(), config


def read_metrics(folder: str | os.PathLike) -> dict[str, Any]:
    path = Path(folder) / METRICS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def probabilities(folder: str | os.PathLike, images: np.ndarray, device: str = "cpu") -> np.ndarray:
    model, _ = load_checkpoint(folder, device)
    return predict_proba(model, images)


def _write(path: Path, writer) -> None:
    tmp = path.with_name(path.name + ".tmp")
    writer(tmp)
    os.replace(tmp, path)
