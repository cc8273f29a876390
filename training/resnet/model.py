"""RLinf's ResNet reward classifier (shared/reference formats section 3), plain torch.

The state dict is exactly RLinf's: the torchvision ResNet under `backbone.` with `backbone.fc` replaced by
the head, and nothing else (mean/std are non-persistent buffers), so RLinf loads it with strict=True.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import numpy as np
import torch
import torchvision
from torch import nn
from torch.nn import functional as F

from .config import ResNetConfig

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Prefixes RLinf strips from checkpoint keys and keys it ignores.
STRIP_PREFIXES = ("module.", "_orig_mod.", "model.")
IGNORED_KEYS = frozenset({"mean", "std", "_mean", "_std"})


def build_head(config: ResNetConfig) -> nn.Module:
    if config.hidden_dim:
        head: nn.Module = nn.Sequential(
            nn.Linear(config.feature_dim, config.hidden_dim),
            nn.ReLU(),
            nn.Dropout(config.dropout),
            nn.Linear(config.hidden_dim, 1),
        )
    else:
        head = nn.Linear(config.feature_dim, 1)
    for module in head.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)
    return head


class RewardResNet(nn.Module):
    """Images in (uint8 [B,H,W,C] or float NCHW in [0,1]), one success logit per image out ([B])."""

    mean: torch.Tensor  # buffers registered in __init__
    std: torch.Tensor

    def __init__(self, config: ResNetConfig):
        super().__init__()
        self.config = config
        backbone = getattr(torchvision.models, config.arch)(weights=None)
        backbone.fc = build_head(config)
        self.backbone = backbone
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """RLinf's preprocessing: channels last -> NCHW, /255 for uint8, bilinear resize, ImageNet normalize."""
        if images.ndim == 3:
            images = images.unsqueeze(0)
        if images.ndim != 4:
            raise ValueError(f"images must be [B,H,W,C] or [B,C,H,W], got shape {list(images.shape)}")
        if images.shape[-1] in (1, 3, 4):
            images = images.permute(0, 3, 1, 2)
        if images.dtype == torch.uint8:
            x = images.to(self.mean.device, non_blocking=True).float().div_(255.0)
        else:
            x = images.to(self.mean.device, dtype=torch.float32)
        channels = x.shape[1]
        if channels == 1:
            x = x.expand(-1, 3, -1, -1)
        elif channels == 4:
            x = x[:, :3]
        elif channels != 3:
            raise ValueError(f"images must have 1, 3 or 4 channels, got {channels}")
        if self.config.crop:
            x = crop_box(x, self.config.crop)
        height, width = self.config.image_size[1:]
        if x.shape[-2:] != (height, width):
            x = F.interpolate(x, size=(height, width), mode="bilinear", align_corners=False)
        return (x - self.mean) / self.std

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Preprocessing in fp32, then the backbone in its own dtype and memory format (a served model's
        placement, `training.resnet.placement`, may cast it to bf16/fp16 and channels_last)."""
        x = self.preprocess(images)
        weight = self.backbone.conv1.weight
        if not weight.is_contiguous() and weight.is_contiguous(memory_format=torch.channels_last):
            x = x.contiguous(memory_format=torch.channels_last)
        return self.backbone(x.to(weight.dtype)).squeeze(-1)


def crop_box(x: torch.Tensor, box: list[float]) -> torch.Tensor:
    """The [top, left, height, width] fractions of NCHW images, rounded to whole pixels (at least one)."""
    rows, cols = x.shape[-2:]
    top, left = round(box[0] * rows), round(box[1] * cols)
    height, width = max(1, round(box[2] * rows)), max(1, round(box[3] * cols))
    return x[..., top : min(rows, top + height), left : min(cols, left + width)]


def clean_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A checkpoint's keys as RLinf's loader reads them: prefixes stripped, mean/std dropped."""
    cleaned = {}
    for key, value in state_dict.items():
        name = key
        stripped = True
        while stripped:
            stripped = False
            for prefix in STRIP_PREFIXES:
                if name.startswith(prefix):
                    name = name[len(prefix) :]
                    stripped = True
        if name in IGNORED_KEYS or name.rsplit(".", 1)[-1] in IGNORED_KEYS:
            continue
        cleaned[name] = value
    return cleaned


def load_pretrained_backbone(model: RewardResNet, path: str) -> list[str]:
    """Copy torchvision ResNet weights from a local file into the backbone (the head stays fresh).

    Accepts a torchvision state dict (`conv1.weight`, ...) or one with `backbone.` keys. Returns the
    backbone keys that were not in the file (the head's); any other missing key is an error.
    """
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    state = clean_state_dict(state)
    state = {k.removeprefix("backbone."): v for k, v in state.items()}
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    result = model.backbone.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.startswith("fc.")]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"{path} does not match {model.config.arch}: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}"
        )
    return list(result.missing_keys)


def predict_proba_and_features(
    model: RewardResNet, images: np.ndarray, *, batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Success probabilities (float32 [B]) and the backbone's features before the head (float32 [B,F]),
    the frames' embedding (the labeling queue's coverage picks compare frames by it)."""
    if images.ndim == 3:
        images = images[None]
    probabilities, features = [], []
    kept: list[torch.Tensor] = []
    hook = model.backbone.fc.register_forward_pre_hook(lambda _module, inputs: kept.append(inputs[0]))
    try:
        with torch.inference_mode():
            for start in range(0, len(images), batch_size):
                batch = torch.from_numpy(np.ascontiguousarray(images[start : start + batch_size]))
                probabilities.append(torch.sigmoid(model(batch).float()).cpu().numpy())
                features.append(kept.pop().float().flatten(1).cpu().numpy())
    finally:
        hook.remove()
    if not probabilities:
        return np.zeros(0, dtype=np.float32), np.zeros((0, model.config.feature_dim), dtype=np.float32)
    return np.concatenate(probabilities), np.concatenate(features)


def host_tensor(images: np.ndarray) -> torch.Tensor:
    """A batch as a tensor over the same memory (copied only when not C-contiguous)."""
    return torch.from_numpy(np.ascontiguousarray(images))


def predict_proba(
    model: RewardResNet,
    images: np.ndarray,
    *,
    batch_size: int = 256,
    to_device: Callable[[np.ndarray], torch.Tensor] = host_tensor,
) -> np.ndarray:
    """Success probabilities (float32 [B]) for uint8 [B,H,W,3] images; `to_device` moves each chunk (a served
    model's `HostStaging.to_device` stages it in pinned memory on CUDA)."""
    if images.ndim == 3:
        images = images[None]
    if len(images) == 0:
        return np.zeros(0, dtype=np.float32)
    outputs = []
    with torch.inference_mode():
        for start in range(0, len(images), batch_size):
            batch = to_device(images[start : start + batch_size])
            outputs.append(torch.sigmoid(model(batch).float()).cpu().numpy())
    return np.concatenate(outputs).astype(np.float32, copy=False)


def input_frame(image: np.ndarray, config: ResNetConfig) -> np.ndarray:
    """One uint8 HxWx3 frame as the model takes it in: `config.crop` cut out and resized to `image_size`
    (bilinear, as preprocess does), rounded back to uint8 (within half a level of what preprocess feeds
    the network). Background scoring keeps these instead of whole frames; score them with `uncropped`."""
    with warnings.catch_warnings():  # a decoded frame is read-only, and only read here
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).unsqueeze(0)
    if config.crop:
        x = crop_box(x, config.crop)
    height, width = config.image_size[1:]
    if tuple(x.shape[-2:]) != (height, width):
        x = F.interpolate(x.float(), size=(height, width), mode="bilinear", align_corners=False)
        x = x.round_().clamp_(0, 255).to(torch.uint8)
    return x[0].permute(1, 2, 0).contiguous().numpy()


def uncropped(model: RewardResNet) -> RewardResNet:
    """`model`, changed to score frames that input_frame already cut out (its crop is not applied twice)."""
    model.config = dataclasses.replace(model.config, crop=[])
    return model
