"""The ResNet reward classifier's training loop (plain torch, no Django).

Data stays in memory as one uint8 [N,H,W,3] tensor on the training device; batches are index selections,
augmentation (random crop after edge padding, as HIL-SERL does) is one vectorised gather, and the model
does RLinf's preprocessing itself. So the loop costs little beyond the forward and backward passes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from ..kit import distributed
from ..kit.reporting import JobCancelled, MemoryReporter, Reporter
from ..kit.resume import CheckpointClock, rng_restore, state_load, state_save
from .checkpoint import CHECKPOINT_FILES, RLINF_WEIGHTS, copy_checkpoint_files, save_checkpoint, save_rlinf_weights
from .config import ResNetConfig
from .model import RewardResNet, load_pretrained_backbone
from .negatives import with_synthetic_negatives
from .progress import Progress, resume_state, resumed_progress

BEST, LAST = "best", "last"
RLINF_DIR = "checkpoints"  # RLinf's trainer layout: checkpoints/{best_model|global_step_N}/actor/model_state_dict/
REPORT_EVERY = 10  # steps whose metrics are read from the device together


@dataclass
class TrainOutcome:
    best_metrics: dict[str, Any]
    last_metrics: dict[str, Any]
    best_epoch: int
    epochs_run: int
    steps: int
    stopped_early: bool
    best_folder: Path
    last_folder: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    shards: list[dict[str, Any]] = field(default_factory=list)  # per rank: samples (and indices) of its first epoch
    # the epochs alone (steps, per-epoch validation and bookkeeping), without building the model, moving
    # the data and writing the final checkpoints: wall-clock and this process's CPU seconds
    loop_seconds: float = 0.0
    loop_cpu_seconds: float = 0.0


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {name} asked for, but CUDA is not available on this worker")
    return torch.device(name)


def stack_images(images: Sequence[torch.Tensor] | torch.Tensor | np.ndarray, image_size: Sequence[int]) -> torch.Tensor:
    """uint8 [N,H,W,3] from a payload's list of HWC tensors. Mixed sizes are resized to image_size first
    (bilinear, as the model would), so a batch can be one tensor."""
    if isinstance(images, np.ndarray):
        images = torch.from_numpy(images)
    if isinstance(images, torch.Tensor):
        return images.contiguous()
    if not images:
        raise ValueError("no images")
    shapes = {tuple(img.shape) for img in images}
    if len(shapes) == 1:
        return torch.stack(list(images))
    height, width = image_size[1], image_size[2]
    resized = []
    for img in images:
        x = img.permute(2, 0, 1).unsqueeze(0).float()
        x = F.interpolate(x, size=(height, width), mode="bilinear", align_corners=False)
        resized.append(x.round().clamp(0, 255).to(torch.uint8)[0].permute(1, 2, 0))
    return torch.stack(resized)


def random_crop(images: torch.Tensor, padding: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Pad each [B,H,W,C] image by `padding` (edge values) and crop back to HxW at a random offset."""
    if padding <= 0:
        return images
    batch, height, width, _ = images.shape
    padded = F.pad(images.permute(0, 3, 1, 2).float(), (padding,) * 4, mode="replicate").to(images.dtype)
    padded = padded.permute(0, 2, 3, 1)
    offsets = torch.randint(0, 2 * padding + 1, (2, batch), generator=generator, device="cpu").to(images.device)
    rows = offsets[0][:, None] + torch.arange(height, device=images.device)[None, :]
    cols = offsets[1][:, None] + torch.arange(width, device=images.device)[None, :]
    index = torch.arange(batch, device=images.device)[:, None, None]
    return padded[index, rows[:, :, None], cols[:, None, :]]


def lr_factor(step: int, warmup_steps: int, schedule: str = "constant", total_steps: int = 0) -> float:
    """Linear warmup from 1/warmup to 1, then constant, or with "cosine" a half cosine from 1 after the
    warmup down to 0 after the last of `total_steps`."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "cosine" and total_steps > warmup_steps:
        progress = (step - warmup_steps) / (total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return 1.0


def effective_warmup(config: ResNetConfig, total_steps: int) -> int:
    """The configured warmup, capped at a fifth of the run so short runs still reach the full learning rate."""
    return min(config.warmup_steps, max(0, total_steps // 5))


@torch.inference_mode()
def evaluate(
    model: RewardResNet, images: torch.Tensor, labels: torch.Tensor, batch_size: int
) -> tuple[float, float, np.ndarray]:
    """(mean BCE loss, accuracy at 0.5, probabilities) over a whole split."""
    was_training = model.training
    model.eval()
    logits = []
    for start in range(0, len(images), batch_size):
        logits.append(model(images[start : start + batch_size]).float())
    model.train(was_training)
    all_logits = torch.cat(logits) if logits else torch.zeros(0, device=labels.device)
    loss = F.binary_cross_entropy_with_logits(all_logits, labels).item() if len(labels) else float("nan")
    probs = torch.sigmoid(all_logits)
    accuracy = ((probs > 0.5).float() == labels).float().mean().item() if len(labels) else float("nan")
    return loss, accuracy, probs.cpu().numpy().astype(np.float32)


@torch.no_grad()
def recalibrate_batchnorm(model: RewardResNet, images: torch.Tensor, batch_size: int) -> None:
    """Replace every BatchNorm layer's running mean and variance by their average over `images` as the
    model now computes them (train-mode forward passes, weights untouched); the model is left in eval mode."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in layers]
    for layer in layers:
        layer.reset_running_stats()
        layer.momentum = None  # a cumulative average over all batches
    model.train()
    for start in range(0, len(images), batch_size):
        if len(images) - start > 1:  # BatchNorm cannot take a batch of one image
            model(images[start : start + batch_size])
    for layer, momentum in zip(layers, momenta, strict=True):
        layer.momentum = momentum
    model.eval()


def _report_steps(reporter: Reporter, pending: list, total_steps: int) -> None:
    if not pending:
        return
    values = torch.stack([torch.stack([loss.float(), correct.float()]) for _, _, _, loss, correct in pending]).tolist()
    for (step, size, lr, _, _), (loss, correct) in zip(pending, values, strict=True):
        reporter.report_step(step, total_steps, train_loss=loss, train_acc=correct / size, lr=lr)
    pending.clear()


@dataclass
class _Splits:
    """The training and validation images (uint8 [N,H,W,3]) and labels (float), on the training device."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor


@dataclass
class _Steps:
    """How every epoch is cut into steps on this rank: each rank trains on its shard of the epoch's order,
    in batches starting at `starts` within the shard."""

    rank: int
    world: int
    shard_length: int
    starts: list[int]
    total_steps: int
    warmup: int

    @property
    def per_epoch(self) -> int:
        return len(self.starts)


@dataclass
class _Run:
    """What a run holds from its set-up to its end."""

    config: ResNetConfig
    out_dir: Path
    reporter: Reporter
    device: torch.device
    generator: torch.Generator  # the batch orders and random crops
    splits: _Splits
    model: RewardResNet
    trained: torch.nn.Module  # the model, or its DistributedDataParallel wrapper under torchrun
    optimizer: torch.optim.Optimizer
    steps: _Steps
    record: distributed.ShardRecord


def train_reward_model(
    config: ResNetConfig,
    train_images,
    train_labels: Sequence[int],
    val_images,
    val_labels: Sequence[int],
    *,
    out_dir: str | Path,
    reporter: Reporter | None = None,
    resume: bool = False,
    checkpoint_seconds: float = 0.0,
) -> TrainOutcome:
    """Train, keep the best and last checkpoints in `out_dir`. A resume state is saved at every epoch end and,
    within an epoch, after the first step at which `checkpoint_seconds` have passed since the last one (0: at
    epoch ends only); with `resume`, a saved state of the same config is loaded and training goes on from the
    step after it, with the same batches and random crops it would have had. (Epoch ends once waited for the
    clock too: a job shorter than `checkpoint_seconds`, 300 by default, saved nothing and a killed one started
    again at epoch 1.)"""
    reporter = reporter or MemoryReporter()
    run = _run_setup(config, (train_images, train_labels), (val_images, val_labels), Path(out_dir), reporter)
    progress = _progress_resumed(run) if resume else Progress()
    clock = CheckpointClock(checkpoint_seconds)
    loop_started, loop_cpu_started = time.perf_counter(), time.process_time()
    for epoch in range(progress.first_epoch, 0 if progress.finished else config.epochs + 1):
        progress.epoch = epoch
        _epoch_run(run, progress, clock)
        if progress.stopped_early:
            break
    loop_seconds = (time.perf_counter() - loop_started, time.process_time() - loop_cpu_started)
    shards = run.record.gathered()
    if run.steps.rank != 0:  # only rank 0 writes checkpoints; the others return what they trained
        return _outcome(run, progress, progress.best_metrics or dict(progress.last_metrics), shards, loop_seconds)
    _checkpoints_save(run, progress)
    return _outcome(run, progress, progress.best_metrics, shards, loop_seconds)


# ---- set-up ------------------------------------------------------------------------------------------


def _run_setup(
    config: ResNetConfig,
    train: tuple[Any, Sequence[int]],
    val: tuple[Any, Sequence[int]],
    out_dir: Path,
    reporter: Reporter,
) -> _Run:
    """Seed, move the data to the device, build the model and optimiser and plan each rank's steps."""
    if config.num_threads:  # the job runner puts the process's own value back after the job
        torch.set_num_threads(config.num_threads)
    reporter.log(f"torch threads: {torch.get_num_threads()}")
    torch.manual_seed(config.seed)
    np.random.seed(config.seed % (2**32))
    device = distributed.rank_device(pick_device(config.device))
    generator = torch.Generator().manual_seed(config.seed)
    splits = _splits_on_device(config, train, val, device, reporter)
    model = _model_build(config, device, reporter)
    trained = distributed.wrap(model)  # DistributedDataParallel under torchrun: gradients averaged over ranks
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    steps = _rank_steps(config, len(splits.x_train))
    reporter.log(
        f"training {config.arch} on {len(splits.x_train)} images ({int(splits.y_train.sum())} success), validating "
        f"on {len(splits.x_val)}; {config.epochs} epochs x {steps.per_epoch} steps, warmup {steps.warmup}, device "
        f"{device}" + (f"; {steps.world} ranks, {steps.shard_length} images each per epoch" if steps.world > 1 else "")
    )
    return _Run(
        config=config,
        out_dir=out_dir,
        reporter=reporter,
        device=device,
        generator=generator,
        splits=splits,
        model=model,
        trained=trained,
        optimizer=optimizer,
        steps=steps,
        record=distributed.ShardRecord(),
    )


def _splits_on_device(
    config: ResNetConfig,
    train: tuple[Any, Sequence[int]],
    val: tuple[Any, Sequence[int]],
    device: torch.device,
    reporter: Reporter,
) -> _Splits:
    """Both splits as tensors on `device`, checked, with the configured synthetic fail frames added to training."""
    x_train = stack_images(train[0], config.image_size).to(device)
    y_train = torch.as_tensor(list(train[1]), dtype=torch.float32, device=device)
    x_val = stack_images(val[0], config.image_size).to(device)
    y_val = torch.as_tensor(list(val[1]), dtype=torch.float32, device=device)
    if len(x_train) != len(y_train) or len(x_val) != len(y_val):
        raise ValueError("images and labels differ in length")
    if len(x_train) < 2 or len(x_val) == 0:
        raise ValueError("the training split needs at least 2 images and the validation split at least 1")
    x_train, y_train, added = with_synthetic_negatives(x_train, y_train, config.synthetic_negatives, seed=config.seed)
    if added:
        reporter.log(f"added {added} synthetic fail frames (blank, constant colour, noise) to the training split")
    return _Splits(x_train, y_train, x_val, y_val)


def _model_build(config: ResNetConfig, device: torch.device, reporter: Reporter) -> RewardResNet:
    model = RewardResNet(config)
    if config.pretrained:
        load_pretrained_backbone(model, config.pretrained_path)
        reporter.log(f"loaded pretrained backbone from {config.pretrained_path}")
    model.to(device).train()
    return model


def _rank_steps(config: ResNetConfig, train_count: int) -> _Steps:
    """Each rank trains on its shard of every epoch's order; a last batch of one image is dropped (BatchNorm
    cannot train on a single sample)."""
    rank, world = distributed.current().rank, distributed.current().world_size
    shard_length = distributed.shard_size(train_count)
    starts = [s for s in range(0, shard_length, config.batch_size) if shard_length - s > 1 or s == 0]
    total_steps = len(starts) * config.epochs
    return _Steps(rank, world, shard_length, starts, total_steps, effective_warmup(config, total_steps))


# ---- resume ------------------------------------------------------------------------------------------


def _progress_resumed(run: _Run) -> Progress:
    """The progress of a saved resume state of the same config, with its weights, optimiser and RNG states
    restored; a fresh start when there is none."""
    state = state_load(run.out_dir, config=run.config.to_dict())
    if state is None:
        return Progress()
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.generator.set_state(state["generator"])
    rng_restore(state["rng"])
    progress = resumed_progress(state, run.steps.per_epoch)
    run.reporter.resumed(step=progress.step)
    run.reporter.log(
        f"resumed from the checkpoint at epoch {progress.epoch}, step {progress.step} (position {state['position']})"
    )
    return progress


def _state_save(
    run: _Run, progress: Progress, clock: CheckpointClock, position: int, order: torch.Tensor, totals: torch.Tensor
) -> None:
    if not distributed.is_main():  # rank 0 keeps the one resume state (all ranks hold the same weights)
        clock.reset()
        return
    state = resume_state(
        progress,
        config=run.config.to_dict(),
        position=position,
        order=order,
        totals=totals,
        model=run.model,
        optimizer=run.optimizer,
        generator=run.generator,
    )
    state_save(run.out_dir, state)
    clock.reset()


# ---- an epoch ----------------------------------------------------------------------------------------


def _epoch_run(run: _Run, progress: Progress, clock: CheckpointClock) -> None:
    """Train `progress.epoch`, validate, report, decide on an early stop, and save the resume state (every
    epoch end: a requeued job never repeats a whole epoch)."""
    config = run.config
    started = time.monotonic()
    order, totals = _epoch_order(run, progress)
    _epoch_steps(run, progress, clock, order, totals)
    improved = _epoch_validate(run, progress, totals, started)
    _epoch_report(run.reporter, progress.last_metrics, improved)
    progress.stopped_early = bool(config.patience and progress.bad_epochs >= config.patience)
    progress.finished = progress.stopped_early or progress.epoch == config.epochs
    _state_save(run, progress, clock, run.steps.per_epoch, order, totals)
    if progress.stopped_early:
        run.reporter.log(f"early stop: val_loss did not improve by {config.min_delta} for {config.patience} epochs")


def _epoch_order(run: _Run, progress: Progress) -> tuple[torch.Tensor, torch.Tensor]:
    """The epoch's order of the training images and its running totals (loss sum, correct count): those a
    resume state saved mid-epoch, else a new shuffle and zeros."""
    if progress.saved_order is not None and progress.saved_totals is not None:
        order, totals = progress.saved_order.to(run.device), progress.saved_totals.to(run.device)
        progress.saved_order = progress.saved_totals = None
        return order, totals
    order = torch.randperm(len(run.splits.x_train), generator=run.generator).to(run.device)
    return order, torch.zeros(2, device=run.device, dtype=torch.float64)


def _epoch_steps(
    run: _Run, progress: Progress, clock: CheckpointClock, order: torch.Tensor, totals: torch.Tensor
) -> None:
    """The epoch's steps on this rank's shard of `order`, from the position a resume starts at, their loss
    and correct count added to `totals`. Per-step metrics stay on the device and are read in groups, so a
    GPU is not synchronised every step; a resume state is saved mid-epoch when the clock says so."""
    config, steps, reporter = run.config, run.steps, run.reporter
    mine = distributed.shard(order)
    if progress.epoch == progress.first_epoch and steps.world > 1:  # what this rank trains on in its first epoch
        run.record.add(torch.cat([mine[s : s + config.batch_size] for s in steps.starts[progress.first_position :]]))
    pending: list[tuple[int, int, float, torch.Tensor, torch.Tensor]] = []
    for position in range(progress.first_position, steps.per_epoch):
        # alone, a cancel check is cheap (the job reporter rate-limits its query); across ranks it is a
        # collective, so ranks ask together every REPORT_EVERY steps
        if (steps.world == 1 or position % REPORT_EVERY == 0) and reporter.should_cancel():
            raise JobCancelled()
        index = mine[steps.starts[position] : steps.starts[position] + config.batch_size]
        lr, loss, correct = _train_step(run, progress, index)
        totals += torch.stack([loss.double() * len(index), correct.double()])
        pending.append((progress.step, len(index), lr, loss, correct))
        if len(pending) >= REPORT_EVERY:
            _report_steps(reporter, pending, steps.total_steps)
        if clock.due() and position + 1 < steps.per_epoch:
            _report_steps(reporter, pending, steps.total_steps)
            _state_save(run, progress, clock, position + 1, order, totals)
    progress.first_position = 0
    _report_steps(reporter, pending, steps.total_steps)


def _train_step(run: _Run, progress: Progress, index: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
    """One optimisation step on the training images at `index`: (its learning rate, loss, correct count)."""
    config = run.config
    images, labels = run.splits.x_train[index], run.splits.y_train[index]
    if config.augment:
        images = random_crop(images, config.crop_padding, run.generator)
    lr = config.lr * lr_factor(progress.step, run.steps.warmup, config.schedule, run.steps.total_steps)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    logits = run.trained(images)
    loss = F.binary_cross_entropy_with_logits(logits, labels)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if config.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), config.grad_clip)
    run.optimizer.step()
    progress.step += 1
    correct = ((logits.detach() > 0).float() == labels).sum()
    return lr, loss.detach(), correct


def _epoch_validate(run: _Run, progress: Progress, totals: torch.Tensor, started: float) -> bool:
    """Record the epoch's metrics as the last (training totals summed over the ranks, validation averaged
    over them, so every rank decides alike); whether they are the best so far."""
    config, steps, splits = run.config, run.steps, run.splits
    loss_sum, correct_sum = distributed.all_reduce_sum(totals.clone()).tolist()
    seen = min(steps.shard_length, steps.per_epoch * config.batch_size) * steps.world
    val_loss, val_acc, _ = evaluate(run.model, splits.x_val, splits.y_val, max(config.batch_size, 256))
    val_loss, val_acc = distributed.all_reduce_mean([val_loss, val_acc])
    progress.last_metrics = {
        "epoch": progress.epoch,
        "step": progress.step,
        "train_loss": loss_sum / seen,
        "train_acc": correct_sum / seen,
        "val_loss": val_loss,
        "val_acc": val_acc,
        "epoch_seconds": time.monotonic() - started,
    }
    progress.history.append(progress.last_metrics)
    return _best_update(run, progress, val_loss)


def _best_update(run: _Run, progress: Progress, val_loss: float) -> bool:
    """Keep the epoch as the best when its val_loss improved by min_delta (else count a bad epoch); whether it did."""
    config, model = run.config, run.model
    improved = val_loss < progress.best_loss - config.min_delta
    if not improved:
        progress.bad_epochs += 1
        return False
    progress.best_loss, progress.best_epoch, progress.bad_epochs = val_loss, progress.epoch, 0
    progress.best_metrics = dict(progress.last_metrics)
    # the last epoch's weights train no further: they need no copy of their own; nor do any epoch's when the
    # job keeps the last weights (select "last")
    progress.best_state = (
        model.state_dict()
        if progress.epoch == config.epochs or config.select == "last"
        else {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    )
    return True


def _epoch_report(reporter: Reporter, metrics: dict[str, Any], improved: bool) -> None:
    reporter.report_epoch(
        metrics["epoch"],
        step=metrics["step"],
        val_loss=metrics["val_loss"],
        val_acc=metrics["val_acc"],
        train_loss=metrics["train_loss"],
        train_acc=metrics["train_acc"],
    )
    reporter.log(
        f"epoch {metrics['epoch']}: train_loss {metrics['train_loss']:.4f} train_acc {metrics['train_acc']:.3f} "
        f"val_loss {metrics['val_loss']:.4f} val_acc {metrics['val_acc']:.3f}" + (" (best)" if improved else "")
    )


# ---- finish ------------------------------------------------------------------------------------------


def _checkpoints_save(run: _Run, progress: Progress) -> None:
    """Write the last checkpoint and the best one (rank 0 only), BatchNorm recalibrated first if asked."""
    config, model, out_dir = run.config, run.model, run.out_dir
    if config.bn_recalibrate:
        recalibrate_batchnorm(model, run.splits.x_train, max(config.batch_size, 256))
    save_checkpoint(model, config, out_dir / LAST, metrics=progress.last_metrics, step=progress.step)
    last_rlinf = out_dir / RLINF_DIR / f"global_step_{progress.step}"
    if config.save_rlinf_layout:
        save_rlinf_weights(model, last_rlinf)
    if config.select == "last":
        progress.best_epoch = progress.epoch
    if progress.best_state is None or progress.best_epoch == progress.epoch:
        # the last weights are the best, are asked for (select "last"), or are all we have (val_loss never
        # finite): the best checkpoint is the last one's files, linked rather than written again
        progress.best_metrics = dict(progress.last_metrics)
        _best_linked_to_last(run, last_rlinf)
    else:
        _best_written(run, progress.best_state, progress.best_metrics)
    run.reporter.log(f"saved best (epoch {progress.best_epoch or progress.epoch}) and last checkpoints")


def _best_linked_to_last(run: _Run, last_rlinf: Path) -> None:
    copy_checkpoint_files(run.out_dir / LAST, run.out_dir / BEST, CHECKPOINT_FILES)
    if run.config.save_rlinf_layout:
        copy_checkpoint_files(last_rlinf, run.out_dir / RLINF_DIR / "best_model", [RLINF_WEIGHTS])


def _best_written(run: _Run, best_state: dict[str, torch.Tensor], best_metrics: dict[str, Any]) -> None:
    """The best epoch's weights, loaded back into the model (recalibrated if asked), written as the best checkpoint."""
    config, model = run.config, run.model
    model.load_state_dict(best_state)
    if config.bn_recalibrate:
        recalibrate_batchnorm(model, run.splits.x_train, max(config.batch_size, 256))
    save_checkpoint(model, config, run.out_dir / BEST, metrics=best_metrics, step=best_metrics["step"])
    if config.save_rlinf_layout:
        save_rlinf_weights(model, run.out_dir / RLINF_DIR / "best_model")


def _outcome(
    run: _Run, progress: Progress, best_metrics: dict, shards: list[dict[str, Any]], loop_seconds: tuple[float, float]
) -> TrainOutcome:
    return TrainOutcome(
        best_metrics=best_metrics,
        last_metrics=progress.last_metrics,
        best_epoch=progress.best_epoch or progress.epoch,
        epochs_run=progress.epoch,
        steps=progress.step,
        stopped_early=progress.stopped_early,
        best_folder=run.out_dir / BEST,
        last_folder=run.out_dir / LAST,
        history=progress.history,
        shards=shards,
        loop_seconds=loop_seconds[0],
        loop_cpu_seconds=loop_seconds[1],
    )
