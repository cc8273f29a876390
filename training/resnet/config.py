"""The ResNet reward classifier's configuration: what builds the model and how it is trained.

The model and optimiser defaults are RLinf's (shared/reference formats section 3: hidden_dim 256, dropout 0.1,
AdamW lr 1e-4, weight decay 1e-5, clip 1.0, 100 warmup steps, early stop on val_loss with patience 5); its
trainer differs in two ways: it starts from ImageNet weights (`pretrained`; nothing is downloaded here, so ours
starts from scratch unless `pretrained_path` names a local file) and it has no augmentation (ours shifts each
image at random, as HIL-SERL does: `augment`, `crop_padding`). Validation happens in
`__post_init__`, so a bad config fails before a job is queued, with a message naming the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..kit.parallel_config import DEFAULT_MASTER_PORT, settings_errors

SCHEDULES = ("constant", "cosine")
SELECTIONS = ("val_loss", "last")
ARCH_FEATURES = {"resnet18": 512, "resnet34": 512, "resnet50": 2048, "resnet101": 2048, "resnet152": 2048}
# Keys a config.json may carry beside the config itself (written by save_checkpoint).
META_KEYS = frozenset({"model_type", "format_version", "step"})


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the field."""


@dataclass
class ResNetConfig:
    # model
    arch: str = "resnet18"
    hidden_dim: int | None = 256
    dropout: float = 0.1
    image_size: list[int] = field(default_factory=lambda: [3, 128, 128])
    # [top, left, height, width] as fractions of each input image, cut out before the resize to image_size,
    # in training and serving alike (empty: the whole image, as RLinf's model sees it)
    crop: list[float] = field(default_factory=list)
    pretrained: bool = False
    pretrained_path: str = ""
    # optimisation
    lr: float = 1e-4
    weight_decay: float = 1e-5
    grad_clip: float = 1.0
    warmup_steps: int = 100
    # after the warmup: "constant" (RLinf's) or "cosine" (decays to 0 at the last step)
    schedule: str = "constant"
    batch_size: int = 32
    epochs: int = 10
    # augmentation: random crop after zero padding (as HIL-SERL does)
    augment: bool = True
    crop_padding: int = 4
    # synthetic fail frames (black, white, one colour, noise: training.resnet.negatives) added to the training
    # split, as a fraction of its size; training data only, the model and RLinf's view of it are unchanged
    synthetic_negatives: float = 0.0
    # the job's model ("best" checkpoint): the epoch with the lowest val_loss, or the last epoch's weights
    select: str = "val_loss"
    # recompute BatchNorm's running statistics over the training images (no augmentation) before the
    # checkpoints are saved, so eval mode normalises with the saved weights' own statistics
    bn_recalibrate: bool = False
    # early stopping on val_loss (patience 0 disables it)
    patience: int = 5
    min_delta: float = 0.001
    # run
    seed: int = 42
    device: str = "auto"
    num_threads: int = 0
    save_rlinf_layout: bool = False
    # data-parallel under torchrun (training.kit.distributed): processes per node (one per GPU) x nodes
    processes: int = 1
    nodes: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_MASTER_PORT

    def __post_init__(self) -> None:
        if self.arch not in ARCH_FEATURES:
            raise ConfigError(f"arch must be one of {sorted(ARCH_FEATURES)}, got {self.arch!r}")
        if self.hidden_dim in (0, None):
            self.hidden_dim = None
        elif not _is_int(self.hidden_dim) or self.hidden_dim < 1:
            raise ConfigError(f"hidden_dim must be a positive integer or empty, got {self.hidden_dim!r}")
        _check_range("dropout", self.dropout, 0.0, 0.99)
        size = list(self.image_size) if isinstance(self.image_size, list | tuple) else None
        if size is None or len(size) != 3 or not all(_is_int(v) for v in size):
            raise ConfigError(f"image_size must be [3, H, W], got {self.image_size!r}")
        if size[0] != 3 or not (16 <= size[1] <= 1024 and 16 <= size[2] <= 1024):
            raise ConfigError(f"image_size must be [3, H, W] with 16 <= H, W <= 1024, got {size}")
        self.image_size = [int(v) for v in size]
        self.crop = _checked_crop(self.crop)
        if self.pretrained and not self.pretrained_path:
            raise ConfigError("pretrained needs pretrained_path: a local file with torchvision resnet weights")
        _check_range("lr", self.lr, 1e-9, 1.0)
        _check_range("weight_decay", self.weight_decay, 0.0, 1.0)
        _check_range("grad_clip", self.grad_clip, 0.0, 1e6)
        _check_int("warmup_steps", self.warmup_steps, 0, 10_000_000)
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.select not in SELECTIONS:
            raise ConfigError(f"select must be one of {', '.join(SELECTIONS)}, got {self.select!r}")
        _check_int("batch_size", self.batch_size, 1, 4096)
        _check_int("epochs", self.epochs, 1, 10_000)
        _check_int("crop_padding", self.crop_padding, 0, 64)
        _check_range("synthetic_negatives", self.synthetic_negatives, 0.0, 1.0)
        _check_int("patience", self.patience, 0, 10_000)
        _check_range("min_delta", self.min_delta, 0.0, 1e6)
        _check_int("seed", self.seed, 0, 2**32 - 1)
        _check_int("num_threads", self.num_threads, 0, 512)
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        for name in ("pretrained", "augment", "save_rlinf_layout", "bn_recalibrate"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false")
        errors = settings_errors(self.processes, self.nodes, self.master_addr, self.master_port)
        if errors:
            raise ConfigError("; ".join(errors))

    @property
    def feature_dim(self) -> int:
        return ARCH_FEATURES[self.arch]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResNetConfig:
        """A config from JSON-like data; unknown keys are an error (a typo must not pass silently)."""
        if not isinstance(data, dict):
            raise ConfigError("config must be a JSON object")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names - META_KEYS)
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:
            raise ConfigError(str(exc)) from None


def _checked_crop(crop: Any) -> list[float]:
    if crop in (None, []):
        return []
    box = list(crop) if isinstance(crop, list | tuple) else []
    if len(box) != 4 or any(isinstance(v, bool) or not isinstance(v, int | float) for v in box):
        raise ConfigError(f"crop must be empty or [top, left, height, width] as fractions, got {crop!r}")
    top, left, height, width = (float(v) for v in box)
    if not (0 <= top < 1 and 0 <= left < 1 and 0 < height <= 1 - top and 0 < width <= 1 - left):
        raise ConfigError(
            f"crop must lie inside the image: 0 <= top, left and top + height, left + width <= 1, got {box}"
        )
    return [top, left, height, width]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    if not _is_int(value) or not low <= value <= high:
        raise ConfigError(f"{name} must be an integer between {low} and {high}, got {value!r}")


def _check_range(name: str, value: Any, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ConfigError(f"{name} must be a number between {low} and {high}, got {value!r}")
