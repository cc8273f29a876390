"""How far a frame is from the frames a ResNet reward model was trained on (no Django).

The method is Lee et al., "A Simple Unified Framework for Detecting Out-of-Distribution Samples and
Adversarial Attacks" (NeurIPS 2018): class-conditional Gaussians with one shared covariance in the network's
feature spaces (the penultimate one, the input of the head `backbone.fc`, and, as their feature ensemble, the
spatial means of the earlier stages); a frame's distance in each is its Mahalanobis distance to the closest
class mean. Fitted once after training on the training frames' features (each covariance shrunk towards its
mean variance, since a small project has fewer frames than features). It lives beside the checkpoint in
`ood.safetensors`; `model.safetensors` (RLinf's) is untouched.

The threshold is calibrated on episodes the Gaussians did not see, since frames of one episode are near copies
of each other and a new episode (a new cube position) is what a deployment meets. The validation split holds
few episodes (2 of the demo's 12), and a threshold at their 99th percentile flagged 17-31% of the frames of
unseen demo episodes. So the calibration scores are cross-fitted by episode, as in cross-conformal prediction
(Vovk, "Cross-conformal predictors", Annals of Mathematics and Artificial Intelligence 2015; Barber, Candes,
Ramdas and Tibshirani, "Predictive inference with the jackknife+", Annals of Statistics 2021): the training
episodes are split into up to CALIBRATION_FOLDS groups, each group's frames are scored by Gaussians fitted on
the other groups, and these out-of-fold scores, with the validation frames' scores under the full fit, give each
layer's scale and the threshold (their 99th percentile, rounded up to one of them: at most 1% of the
calibration frames lie above it). The final Gaussians use every training frame, so new frames score a little
lower than their out-of-fold counterparts: the rule errs towards not flagging. Measured on the demo
(bench/results/tour_model_ood_2026-12-07b.txt): 0% of 8 unseen episodes' frames flagged, every blank, constant,
noise and photometric probe still flagged, 21x and more above the threshold. The 1% is a target, not a bound:
cross-conformal rules hold it on average (at worst 2x it, Barber et al.), and few training episodes calibrate
loosely (tests/training/test_resnet_ood.py: 30 synthetic Gaussian episodes give 0.4-4.5% per draw, mean under
3%, against up to 45% for 2 validation episodes). Without the training frames' episodes (a snapshot from before
`train_index.json`) the validation frames alone calibrate it, as before.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from .model import RewardResNet
from .ood_panel import write_ood_panel

OOD_FILE = "ood.safetensors"
METHOD = "mahalanobis-lee2018"
VAL_QUANTILE = 0.99  # the threshold: the calibration scores' 99th percentile
CALIBRATION_FOLDS = 10  # training episodes in at most this many groups, each scored by the others' Gaussians
SHRINKAGE = 0.1  # covariance shrunk this far towards (mean variance) * identity
MAX_FIT_FRAMES = 4096  # training frames whose features fit the Gaussians (an even sample beyond)


# "conv1": the network's input; "layer1".."layer3": each stage's output; "fc": the head's input (penultimate)
LAYERS = ("conv1", "layer1", "layer2", "layer3", "fc")


@dataclass(frozen=True)
class OodStats:
    """Per layer (LAYERS): class means [classes, F] and the shared precision [F, F]; each layer's score is
    divided by its own validation quantile (`scales`), a frame's score is the largest of them (Lee et al.'s
    feature ensemble, with the maximum standing in for weights fitted on known outliers, which we do not have).
    `whitening` is derived: per layer the precision's Cholesky factor L (precision = L L^T) and the class means
    whitened by it, so a batch's distances to every class mean take one [B,F] @ [F,F] product."""

    means: dict[str, torch.Tensor]
    precision: dict[str, torch.Tensor]
    scales: dict[str, float]
    threshold: float  # scores above it are out of distribution
    val_flagged: float  # fraction of the validation frames above the threshold
    calibration: str = "validation"  # what set the threshold: "validation", or "episodes cross-fitted: ..."
    whitening: dict[str, Whitening] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "whitening", {k: whitening(self.means[k], self.precision[k]) for k in LAYERS})

    def to(self, device: torch.device | str) -> OodStats:
        return OodStats(
            {k: v.to(device) for k, v in self.means.items()},
            {k: v.to(device) for k, v in self.precision.items()},
            self.scales,
            self.threshold,
            self.val_flagged,
            self.calibration,
        )


@dataclass(frozen=True)
class Whitening:
    factor: torch.Tensor  # L [F, F], float32: precision = L @ L.T
    centres: torch.Tensor  # the class means times L, [classes, F]
    centre_norms: torch.Tensor  # their squared norms [classes]


def whitening(means: torch.Tensor, precision: torch.Tensor) -> Whitening:
    """The Cholesky factor of a layer's precision (computed in float64, kept in float32) and the class means
    in its whitened coordinates."""
    factor = torch.linalg.cholesky(precision.double())
    centres = means.double() @ factor
    return Whitening(factor.float(), centres.float(), (centres * centres).sum(dim=1).float())


def _gaussian(x: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    x = np.asarray(x, dtype=np.float64)
    classes = sorted(set(labels.tolist()))
    means = np.stack([x[labels == c].mean(axis=0) for c in classes])
    centred = x - means[np.searchsorted(classes, labels)]
    covariance = centred.T @ centred / len(x)
    scale = max(float(np.trace(covariance)) / covariance.shape[0], 1e-12)
    covariance = (1 - SHRINKAGE) * covariance + SHRINKAGE * scale * np.eye(covariance.shape[0])
    return torch.from_numpy(means).float(), torch.from_numpy(np.linalg.inv(covariance)).float()


def episode_folds(groups: np.ndarray, folds: int = CALIBRATION_FOLDS) -> list[np.ndarray]:
    """Boolean masks over the frames, one per fold: each episode (a group label) in exactly one fold, the
    episodes dealt round-robin in the order they first appear."""
    order = {g: i % folds for i, g in enumerate(dict.fromkeys(np.asarray(groups).tolist()))}
    assigned = np.array([order[g] for g in np.asarray(groups).tolist()])
    return [assigned == k for k in range(min(folds, len(order)))]


def ood_fit(
    train_features: dict[str, np.ndarray],
    train_labels: np.ndarray,
    val_features: dict[str, np.ndarray],
    *,
    train_groups: np.ndarray | None = None,
    quantile: float = VAL_QUANTILE,
) -> OodStats:
    """Class means and the shrunk shared precision per layer from the training features; the layers' scales
    and the threshold from the calibration scores: the validation frames' under that fit and, given each training
    frame's episode (`train_groups`, 2 episodes or more), the training frames' scores cross-fitted by episode."""
    labels = np.asarray(train_labels).astype(np.int64)
    if len(labels) < 2 or any(len(v) == 0 for v in val_features.values()):
        raise ValueError("fitting needs at least 2 training frames and 1 validation frame")
    if train_groups is not None and len(train_groups) != len(labels):
        raise ValueError(f"{len(train_groups)} episode labels for {len(labels)} training frames")
    folds = [] if train_groups is None else episode_folds(np.asarray(train_groups))
    folds = [held for held in folds if (~held).sum() >= 2] if len(folds) >= 2 else []
    means, precision, calibration = {}, {}, {}
    val_raw = {}
    for layer in LAYERS:
        train = np.asarray(train_features[layer], dtype=np.float32)
        means[layer], precision[layer] = _gaussian(train, labels)
        val = torch.from_numpy(np.asarray(val_features[layer], dtype=np.float32))
        val_raw[layer] = layer_scores(whitening(means[layer], precision[layer]), val).numpy()
        scores = [val_raw[layer]]
        for held in folds:  # out-of-fold: each fold's episodes scored by the Gaussians of the others
            fold_means, fold_precision = _gaussian(train[~held], labels[~held])
            scores.append(layer_scores(whitening(fold_means, fold_precision), torch.from_numpy(train[held])).numpy())
        calibration[layer] = np.concatenate(scores)
    scales = {layer: max(float(np.quantile(calibration[layer], quantile)), 1e-6) for layer in LAYERS}
    combined = np.max([calibration[layer] / scales[layer] for layer in LAYERS], axis=0)
    val_scores = np.max([val_raw[layer] / scales[layer] for layer in LAYERS], axis=0)
    # "higher": the threshold is a calibration score itself, so at most (1 - quantile) of them lie above it (the
    # default linear interpolation puts it between two scores: 2 of the tour's 159 frames, 1.3%, were above it)
    threshold = max(float(np.quantile(combined, quantile, method="higher")), 1e-6)
    episodes = len(set(np.asarray(train_groups).tolist())) if folds else 0
    described = (
        f"episodes cross-fitted: {len(labels)} training frames of {episodes} episodes in {len(folds)} folds "
        f"and {len(val_scores)} validation frames"
        if folds
        else "validation"
    )
    return OodStats(means, precision, scales, threshold, float(np.mean(val_scores > threshold)), described)


def layer_scores(white: Whitening, features: torch.Tensor) -> torch.Tensor:
    """Each frame's Mahalanobis distance to the closest class mean ([B] float32, on the features' device):
    with z = x L, |(x - m) L|^2 = |z|^2 - 2 z.(m L) + |m L|^2, one product for all classes."""
    z = features.float().flatten(1) @ white.factor
    squared = (z * z).sum(dim=1, keepdim=True) - 2 * z @ white.centres.T + white.centre_norms
    return squared.min(dim=1).values.clamp_(min=0).sqrt_()


def ood_scores(stats: OodStats, features: dict[str, torch.Tensor]) -> torch.Tensor:
    """The frames' scores: the largest of their layers' distances, each over its layer's scale ([B])."""
    return (
        torch.stack([layer_scores(stats.whitening[k], features[k]) / stats.scales[k] for k in LAYERS]).max(dim=0).values
    )


def ood_save(stats: OodStats, folder: str | os.PathLike) -> Path:
    path = Path(folder) / OOD_FILE
    tmp = path.with_name(path.name + ".tmp")
    meta = {
        "method": METHOD,
        "threshold": repr(stats.threshold),
        "val_flagged": repr(stats.val_flagged),
        "calibration": stats.calibration,
        "scales": json.dumps(stats.scales),
    }
    tensors = {f"means.{k}": v.contiguous() for k, v in stats.means.items()}
    tensors |= {f"precision.{k}": v.contiguous() for k, v in stats.precision.items()}
    save_file(tensors, str(tmp), metadata=meta)
    os.replace(tmp, path)
    return path


def ood_load(folder: str | os.PathLike) -> OodStats | None:
    """The model's OOD statistics, or None for a model trained before they were fitted."""
    path = Path(folder) / OOD_FILE
    if not path.exists():
        return None
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        meta = handle.metadata() or {}
    if meta.get("method") != METHOD:
        raise ValueError(f"{path}: unknown OOD method {meta.get('method')!r} (expected {METHOD!r})")
    tensors = load_file(str(path))
    return OodStats(
        {k: tensors[f"means.{k}"] for k in LAYERS},
        {k: tensors[f"precision.{k}"] for k in LAYERS},
        {k: float(v) for k, v in json.loads(meta["scales"]).items()},
        float(meta["threshold"]),
        float(meta["val_flagged"]),
        meta.get("calibration", "validation"),
    )


def pooled(layer: str, output: torch.Tensor) -> torch.Tensor:
    """A stage's output as one vector per frame: its channels' spatial means, and for the input and the first
    stage their spatial standard deviations too (texture: a flat or blank frame has almost none; Sastry and
    Oore, ICML 2020, score frames by such higher-order feature statistics)."""
    x = output.float()
    if layer in LAYERS[:2]:
        std, mean = torch.std_mean(x, dim=(2, 3))  # one pass over the stage's output
        return torch.cat([mean, std], dim=1)
    return x.mean(dim=(2, 3))


class FeatureTap:
    """Keeps, per forward pass of `model` inside a `with` block, each LAYERS output's spatial mean and the
    head's input (`taken()` hands them over and clears them)."""

    def __init__(self, model: RewardResNet):
        self.model = model
        self.kept: dict[str, torch.Tensor] = {}
        self.after: Callable[[dict[str, torch.Tensor]], None] | None = None  # called with each pass's features

    def __enter__(self) -> FeatureTap:
        backbone = self.model.backbone
        self.hooks = [
            backbone.conv1.register_forward_pre_hook(
                lambda _m, inputs: self.kept.__setitem__("conv1", pooled("conv1", inputs[0]))
            )
        ]
        self.hooks += [
            getattr(backbone, layer).register_forward_hook(
                lambda _m, _i, output, layer=layer: self.kept.__setitem__(layer, pooled(layer, output))
            )
            for layer in LAYERS[1:-1]
        ]
        self.hooks.append(backbone.fc.register_forward_pre_hook(lambda _m, inputs: self._head_input(inputs[0])))
        return self

    def _head_input(self, features: torch.Tensor) -> None:
        self.kept["fc"] = features.float().flatten(1)
        if self.after is not None:
            self.after(self.taken())

    def taken(self) -> dict[str, torch.Tensor]:
        kept, self.kept = self.kept, {}
        return kept

    def __exit__(self, *exc) -> None:
        for hook in self.hooks:
            hook.remove()


def features_and_probabilities(
    model: RewardResNet, images: torch.Tensor | np.ndarray, batch_size: int = 256
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(per layer float32 [B,F] features, float32 [B] success probabilities), the model in eval mode."""
    model.eval()
    images = torch.as_tensor(images)
    features: dict[str, list[torch.Tensor]] = {k: [] for k in LAYERS}
    probabilities = []
    with FeatureTap(model) as tap, torch.inference_mode():
        for start in range(0, len(images), batch_size):
            probabilities.append(torch.sigmoid(model(images[start : start + batch_size]).float()).cpu())
            for k, v in tap.taken().items():
                features[k].append(v.cpu())
    return {k: torch.cat(v).numpy() for k, v in features.items()}, torch.cat(probabilities).numpy()


def even_sample(count: int, limit: int) -> np.ndarray:
    return np.linspace(0, count - 1, min(count, limit)).round().astype(np.int64)


def off_distribution_frames(val_images: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """The evaluation panel's probes, uint8 [N,H,W,3] each: blank (black, white), constant grey, uniform noise,
    and strong photometric shifts of validation frames (dark, bright, low contrast, colour channels swapped)."""
    frames = np.asarray(val_images)[even_sample(len(val_images), 32)]
    height, width = frames.shape[1:3]
    rng = np.random.default_rng(seed)
    as_float = frames.astype(np.float32)
    mean = as_float.mean(axis=(1, 2, 3), keepdims=True)

    def clip(x: np.ndarray) -> np.ndarray:
        return np.clip(x, 0, 255).round().astype(np.uint8)

    return {
        "black": np.zeros((1, height, width, 3), np.uint8),
        "white": np.full((1, height, width, 3), 255, np.uint8),
        "constant grey": np.full((1, height, width, 3), 128, np.uint8),
        "uniform noise": rng.integers(0, 256, size=(8, height, width, 3), dtype=np.uint8),
        "darkened x0.25": clip(as_float * 0.25),
        "brightened x2.5": clip(as_float * 2.5),
        "contrast x0.2": clip(mean + (as_float - mean) * 0.2),
        "channels swapped (BGR)": np.ascontiguousarray(frames[..., ::-1]),
    }


def off_distribution_panel(model: RewardResNet, stats: OodStats, val_images: np.ndarray) -> dict:
    """Per probe: frames, mean probability the model gives, fraction flagged (for the evaluation page)."""
    rows = []
    device = next(model.parameters()).device
    on_device = stats.to(device)
    for name, frames in off_distribution_frames(val_images).items():
        features, probabilities = features_and_probabilities(model, torch.from_numpy(frames).to(device))
        scores = ood_scores(on_device, {k: torch.from_numpy(v).to(device) for k, v in features.items()}).cpu().numpy()
        rows.append(
            {
                "probe": name,
                "frames": len(frames),
                "probability": float(np.mean(probabilities)),
                "flagged": float(np.mean(scores > stats.threshold)),
                "score": float(np.median(scores)) / stats.threshold,  # over the threshold: flagged above 1
            }
        )
    return {
        "method": METHOD,
        "threshold": stats.threshold,
        "val_flagged": stats.val_flagged,
        "calibration": stats.calibration,
        "probes": rows,
    }


def ood_fit_folder(
    folder: str | os.PathLike,
    model: RewardResNet,
    train_images: torch.Tensor | np.ndarray,
    train_labels,
    val_images: torch.Tensor | np.ndarray,
    train_groups=None,
) -> OodStats:
    """Fit the statistics of the checkpoint in `folder` (whose weights `model` holds) and write them, and the
    evaluation page's off-distribution panel, beside it. `train_groups`: each training frame's episode (any
    hashable label), for the threshold cross-fitted by episode; None calibrates on the validation frames alone."""
    pick = even_sample(len(train_images), MAX_FIT_FRAMES)
    train_features, _ = features_and_probabilities(model, torch.as_tensor(train_images)[torch.from_numpy(pick)])
    val_features, _ = features_and_probabilities(model, torch.as_tensor(val_images))
    groups = None if train_groups is None else np.asarray(train_groups)[pick]
    stats = ood_fit(train_features, np.asarray(train_labels)[pick], val_features, train_groups=groups)
    ood_save(stats, folder)
    write_ood_panel(folder, off_distribution_panel(model, stats, torch.as_tensor(val_images).cpu().numpy()))
    return stats
