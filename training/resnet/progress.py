"""What a ResNet training run has done so far, and the resume state that keeps it (training.kit.resume).

All of `Progress` is saved, with the weights, the optimiser and the RNG states, at every epoch end and
mid-epoch on the checkpoint clock; a requeued job restores it and goes on from the step after it, with the
same batches and random crops it would have had (training.resnet.train).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..kit.resume import rng_state


@dataclass
class Progress:
    """The counters, the best epoch so far and the metrics history; and where the loop starts: the next
    epoch, or after a resume mid-epoch the saved position in the saved epoch, with its order and totals."""

    step: int = 0
    epoch: int = 0
    best_loss: float = math.inf
    best_epoch: int = 0
    bad_epochs: int = 0
    best_metrics: dict[str, Any] = field(default_factory=dict)
    best_state: dict[str, torch.Tensor] | None = None  # the best epoch's weights, unless they are the last
    last_metrics: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: bool = False
    finished: bool = False
    first_epoch: int = 1
    first_position: int = 0
    saved_order: torch.Tensor | None = None
    saved_totals: torch.Tensor | None = None


def resume_state(
    progress: Progress,
    *,
    config: dict[str, Any],
    position: int,
    order: torch.Tensor,
    totals: torch.Tensor,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
) -> dict[str, Any]:
    """The state to save when the next step is `position` of the epoch's `order`, with its `totals` so far."""
    return {
        "config": config,
        "epoch": progress.epoch,
        "position": position,
        "step": progress.step,
        "order": order.cpu(),
        "totals": totals.cpu(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "best_loss": progress.best_loss,
        "best_epoch": progress.best_epoch,
        "bad_epochs": progress.bad_epochs,
        "best_metrics": progress.best_metrics,
        "best_state": progress.best_state,
        "last_metrics": progress.last_metrics,
        "history": progress.history,
        "stopped_early": progress.stopped_early,
        "finished": progress.finished,
        "generator": generator.get_state(),
        "rng": rng_state(),
    }


def resumed_progress(state: dict[str, Any], steps_per_epoch: int) -> Progress:
    """The progress a saved state holds; the loop goes on at its position, or at the next epoch when the
    state was saved at an epoch end."""
    progress = Progress(
        step=state["step"],
        epoch=state["epoch"],
        best_loss=state["best_loss"],
        best_epoch=state["best_epoch"],
        bad_epochs=state["bad_epochs"],
        best_metrics=state["best_metrics"],
        best_state=state["best_state"],
        last_metrics=state["last_metrics"],
        history=state["history"],
        stopped_early=state["stopped_early"],
        finished=state["finished"],
    )
    if state["position"] >= steps_per_epoch:
        progress.first_epoch = progress.epoch + 1
    else:
        progress.first_epoch, progress.first_position = progress.epoch, state["position"]
        progress.saved_order, progress.saved_totals = state["order"], state["totals"]
    return progress
