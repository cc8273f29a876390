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
from ..kit.resume import CheckpointClock, rng_restore, rng_state, state_load, state_save
from .checkpoint import CHECKPOINT_FILES, RLINF_WEIGHTS, copy_checkpoint_files, save_checkpoint, save_rlinf_weights
from .config import ResNetConfig
from .model import RewardResNet, load_pretrained_backbone
from .negatives import with_synthetic_negatives

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
    out_dir = Path(out_dir)
    if config.num_threads:  # the job runner puts the process's own value back after the job
        torch.set_num_threads(config.num_threads)
    reporter.log(f"torch threads: {torch.get_num_threads()}")
    torch.manual_seed(config.seed)
    np.random.seed(config.seed % (2**32))
    device = distributed.rank_device(pick_device(config.device))
    generator = torch.Generator().manual_seed(config.seed)

    x_train = stack_images(train_images, config.image_size).to(device)
    y_train = torch.as_tensor(list(train_labels), dtype=torch.float32, device=device)
    x_val = stack_images(val_images, config.image_size).to(device)
    y_val = torch.as_tensor(list(val_labels), dtype=torch.float32, device=device)
    if len(x_train) != len(y_train) or len(x_val) != len(y_val):
        raise ValueError("images and labels differ in length")
    if len(x_train) < 2 or len(x_val) == 0:
        raise ValueError("the training split needs at least 2 images and the validation split at least 1")
    x_train, y_train, added = with_synthetic_negatives(x_train, y_train, config.synthetic_negatives, seed=config.seed)
    if added:
        reporter.log(f"added {added} synthetic fail frames (blank, constant colour, noise) to the training split")

    model = RewardResNet(config)
    if config.pretrained:
        load_pretrained_backbone(model, config.pretrained_path)
        reporter.log(f"loaded pretrained backbone from {config.pretrained_path}")
    model.to(device).train()
    trained = distributed.wrap(model)  # DistributedDataParallel under torchrun: gradients averaged over ranks
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)

    # each rank trains on its shard of every epoch's order; a last batch of one image is dropped (BatchNorm
    # cannot train on a single sample)
    rank, world = distributed.current().rank, distributed.current().world_size
    shard_length = distributed.shard_size(len(x_train))
    starts = [s for s in range(0, shard_length, config.batch_size) if shard_length - s > 1 or s == 0]
    steps_per_epoch = len(starts)
    total_steps = steps_per_epoch * config.epochs
    warmup = effective_warmup(config, total_steps)
    reporter.log(
        f"training {config.arch} on {len(x_train)} images ({int(y_train.sum())} success), validating on "
        f"{len(x_val)}; {config.epochs} epochs x {steps_per_epoch} steps, warmup {warmup}, device {device}"
        + (f"; {world} ranks, {shard_length} images each per epoch" if world > 1 else "")
    )
    record = distributed.ShardRecord()

    best_loss, best_epoch, bad_epochs, step = math.inf, 0, 0, 0
    best_metrics: dict[str, Any] = {}
    best_state: dict[str, torch.Tensor] | None = None
    last_metrics: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    stopped_early = False
    epoch, first_epoch, first_position, finished = 0, 1, 0, False
    saved_order: torch.Tensor | None = None
    saved_totals: torch.Tensor | None = None
    state = state_load(out_dir, config=config.to_dict()) if resume else None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, epoch = state["step"], state["epoch"]
        best_loss, best_epoch, bad_epochs = state["best_loss"], state["best_epoch"], state["bad_epochs"]
        best_metrics, last_metrics, history = state["best_metrics"], state["last_metrics"], state["history"]
        best_state, stopped_early, finished = state["best_state"], state["stopped_early"], state["finished"]
        generator.set_state(state["generator"])
        rng_restore(state["rng"])
        if state["position"] >= steps_per_epoch:
            first_epoch = epoch + 1
        else:
            first_epoch, first_position = epoch, state["position"]
            saved_order, saved_totals = state["order"], state["totals"]
        reporter.resumed(step=step)
        reporter.log(f"resumed from the checkpoint at epoch {epoch}, step {step} (position {state['position']})")

    def save_state(position: int, order: torch.Tensor, totals: torch.Tensor) -> None:
        if not distributed.is_main():  # rank 0 keeps the one resume state (all ranks hold the same weights)
            clock.reset()
            return
        state_save(
            out_dir,
            {
                "config": config.to_dict(),
                "epoch": epoch,
                "position": position,
                "step": step,
                "order": order.cpu(),
                "totals": totals.cpu(),
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "best_loss": best_loss,
                "best_epoch": best_epoch,
                "bad_epochs": bad_epochs,
                "best_metrics": best_metrics,
                "best_state": best_state,
                "last_metrics": last_metrics,
                "history": history,
                "stopped_early": stopped_early,
                "finished": finished,
                "generator": generator.get_state(),
                "rng": rng_state(),
            },
        )
        clock.reset()

    clock = CheckpointClock(checkpoint_seconds)
    loop_started, loop_cpu_started = time.perf_counter(), time.process_time()
    for epoch in range(first_epoch, 0 if finished else config.epochs + 1):
        started = time.monotonic()
        if saved_order is not None and saved_totals is not None:
            order, totals = saved_order.to(device), saved_totals.to(device)
            saved_order = saved_totals = None
        else:
            order = torch.randperm(len(x_train), generator=generator).to(device)
            totals = torch.zeros(2, device=device, dtype=torch.float64)  # loss sum, correct count
        mine = distributed.shard(order)
        if epoch == first_epoch and world > 1:  # what this rank trains on in its first epoch (read once)
            record.add(torch.cat([mine[s : s + config.batch_size] for s in starts[first_position:]]))
        # per-step metrics stay on the device and are read in groups, so a GPU is not synchronised every step
        pending: list[tuple[int, int, float, torch.Tensor, torch.Tensor]] = []
        for position in range(first_position, steps_per_epoch):
            start = starts[position]
            # alone, a cancel check is cheap (the job reporter rate-limits its query); across ranks it is a
            # collective, so ranks ask together every REPORT_EVERY steps
            if (world == 1 or position % REPORT_EVERY == 0) and reporter.should_cancel():
                raise JobCancelled()
            index = mine[start : start + config.batch_size]
            images, labels = x_train[index], y_train[index]
            if config.augment:
                images = random_crop(images, config.crop_padding, generator)
            lr = config.lr * lr_factor(step, warmup, config.schedule, total_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            logits = trained(images)
            loss = F.binary_cross_entropy_with_logits(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            step += 1
            loss_value = loss.detach()
            correct = ((logits.detach() > 0).float() == labels).sum()
            totals += torch.stack([loss_value.double() * len(index), correct.double()])
            pending.append((step, len(index), lr, loss_value, correct))
            if len(pending) >= REPORT_EVERY:
                _report_steps(reporter, pending, total_steps)
            if clock.due() and position + 1 < steps_per_epoch:
                _report_steps(reporter, pending, total_steps)
                save_state(position + 1, order, totals)
        first_position = 0
        _report_steps(reporter, pending, total_steps)
        loss_sum, correct_sum = distributed.all_reduce_sum(totals.clone()).tolist()
        seen = min(shard_length, steps_per_epoch * config.batch_size) * world
        val_loss, val_acc, _ = evaluate(model, x_val, y_val, max(config.batch_size, 256))
        val_loss, val_acc = distributed.all_reduce_mean([val_loss, val_acc])  # every rank decides alike
        last_metrics = {
            "epoch": epoch,
            "step": step,
            "train_loss": loss_sum / seen,
            "train_acc": correct_sum / seen,
            "val_loss": val_loss,
            "val_acc": val_acc,
            "epoch_seconds": time.monotonic() - started,
        }
        history.append(last_metrics)
        improved = val_loss < best_loss - config.min_delta
        if improved:
            best_loss, best_epoch, bad_epochs = val_loss, epoch, 0
            best_metrics = dict(last_metrics)
            # the last epoch's weights train no further: they need no copy of their own; nor do any epoch's
            # when the job keeps the last weights (select "last")
            best_state = (
                model.state_dict()
                if epoch == config.epochs or config.select == "last"
                else {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            )
        else:
            bad_epochs += 1
        reporter.report_epoch(
            epoch,
            step=step,
            val_loss=val_loss,
            val_acc=val_acc,
            train_loss=last_metrics["train_loss"],
            train_acc=last_metrics["train_acc"],
        )
        reporter.log(
            f"epoch {epoch}: train_loss {last_metrics['train_loss']:.4f} train_acc {last_metrics['train_acc']:.3f} "
            f"val_loss {val_loss:.4f} val_acc {val_acc:.3f}" + (" (best)" if improved else "")
        )
        stopped_early = bool(config.patience and bad_epochs >= config.patience)
        finished = stopped_early or epoch == config.epochs
        save_state(steps_per_epoch, order, totals)  # every epoch end: a requeued job never repeats a whole epoch
        if stopped_early:
            reporter.log(f"early stop: val_loss did not improve by {config.min_delta} for {config.patience} epochs")
            break
    loop_seconds, loop_cpu_seconds = time.perf_counter() - loop_started, time.process_time() - loop_cpu_started
    shards = record.gathered()

    def outcome(best: dict) -> TrainOutcome:
        return TrainOutcome(
            best_metrics=best,
            last_metrics=last_metrics,
            best_epoch=best_epoch or epoch,
            epochs_run=epoch,
            steps=step,
            stopped_early=stopped_early,
            best_folder=out_dir / BEST,
            last_folder=out_dir / LAST,
            history=history,
            shards=shards,
            loop_seconds=loop_seconds,
            loop_cpu_seconds=loop_cpu_seconds,
        )

    if rank != 0:  # only rank 0 writes checkpoints; the others return what they trained
        return outcome(best_metrics or dict(last_metrics))
    if config.bn_recalibrate:
        recalibrate_batchnorm(model, x_train, max(config.batch_size, 256))
    save_checkpoint(model, config, out_dir / LAST, metrics=last_metrics, step=step)
    last_rlinf = out_dir / RLINF_DIR / f"global_step_{step}"
    if config.save_rlinf_layout:
        save_rlinf_weights(model, last_rlinf)
    if config.select == "last":
        best_epoch = epoch
    if best_state is None or best_epoch == epoch:
        # the last weights are the best, are asked for (select "last"), or are all we have (val_loss never
        # finite): the best checkpoint is the last one's files, linked rather than written again
        best_metrics = dict(last_metrics)
        copy_checkpoint_files(out_dir / LAST, out_dir / BEST, CHECKPOINT_FILES)
        if config.save_rlinf_layout:
            copy_checkpoint_files(last_rlinf, out_dir / RLINF_DIR / "best_model", [RLINF_WEIGHTS])
    else:
        model.load_state_dict(best_state)
        if config.bn_recalibrate:
            recalibrate_batchnorm(model, x_train, max(config.batch_size, 256))
        save_checkpoint(model, config, out_dir / BEST, metrics=best_metrics, step=best_metrics["step"])
        if config.save_rlinf_layout:
            save_rlinf_weights(model, out_dir / RLINF_DIR / "best_model")
    reporter.log(f"saved best (epoch {best_epoch or epoch}) and last checkpoints")
    return outcome(best_metrics)
