"""Runs a ResNet TrainingJob: reads the snapshot's train.pt/val.pt, trains, keeps best and last checkpoints.

A job requeued after its worker died finds its resume state under its checkpoint folder and goes on from it."""

from __future__ import annotations

import json
import shutil

from django.conf import settings

from common.filestore.services import work_folder_resume

from ..datasets.rlinf_binary import read_payload
from ..kit import distributed
from ..kit.family_parts import RunResult
from ..kit.reporting import Reporter
from ..kit.resume import state_clear, state_path
from ..storage import local_path, resume_state_copy_drop, resume_state_share
from .config import ResNetConfig
from .ood import METHOD, OodStats
from .train import BEST, pick_device, stack_images, train_reward_model
from .val_predictions import write_val_predictions_file


def run_job(job, reporter: Reporter) -> RunResult:
    config = ResNetConfig.from_dict(job.config)
    snapshot_folder = local_path(job.snapshot.folder)
    train = read_payload(snapshot_folder / "train.pt")
    val = read_payload(snapshot_folder / "val.pt")
    out_dir = work_folder_resume(job.checkpoint_folder, retried=job.attempt > 1)  # published when the job ends
    if distributed.is_main() and not state_path(out_dir).exists():
        shutil.rmtree(out_dir, ignore_errors=True)  # no resume state: start clean
    distributed.barrier()  # under torchrun: no rank looks for a resume state rank 0 is deleting
    resume_state_share(out_dir)  # nodes without a shared disk: rank 0's state (or none) on every node
    outcome = train_reward_model(
        config,
        train["images"],
        train["labels"],
        val["images"],
        val["labels"],
        out_dir=out_dir,
        reporter=reporter,
        resume=True,
        checkpoint_seconds=settings.TRAINING_CHECKPOINT_SECONDS,
    )
    if distributed.is_main():
        write_val_predictions(outcome.best_folder, config, val["images"], val["labels"])
        stats = fit_ood(outcome.best_folder, config, train, val, snapshot_folder)
        reporter.log(
            f"out-of-distribution statistics fitted ({METHOD}): threshold {stats.threshold:.3f}, "
            f"{stats.val_flagged:.1%} of validation frames above it (calibrated on {stats.calibration})"
        )
        state_clear(out_dir)  # trained: the folder published is the model, not a resume state
    resume_state_copy_drop(out_dir)  # another node's copy of it too
    metrics = {
        **{k: v for k, v in outcome.best_metrics.items() if k != "epoch_seconds"},
        "best_epoch": outcome.best_epoch,
        "epochs_run": outcome.epochs_run,
        "steps": outcome.steps,
        "stopped_early": outcome.stopped_early,
        "num_train": len(train["labels"]),
        "num_val": len(val["labels"]),
        "last": {k: v for k, v in outcome.last_metrics.items() if k != "epoch_seconds"},
    }
    if distributed.current().distributed:
        metrics["distributed"] = distributed.shards_report(outcome.shards, out_dir, reporter)
    return RunResult(
        checkpoint_path=f"{job.checkpoint_folder}/{BEST}",
        metrics=metrics,
        config=config.to_dict(),
        name=f"{job.project.name} resnet #{job.pk}",
    )


def write_val_predictions(folder, config: ResNetConfig, images, labels) -> None:
    """Cache the best model's validation probabilities beside it (evaluation pages read them)."""
    from .checkpoint import load_checkpoint
    from .model import predict_proba

    model, _ = load_checkpoint(folder)
    write_val_predictions_file(folder, predict_proba(model, stack_images(images, config.image_size).numpy()), labels)


def train_episodes(snapshot_folder, count: int) -> list[str] | None:
    """Each train.pt frame's episode, from the snapshot's train_index.json (None for a snapshot made before it,
    or one whose index does not list `count` frames): the OOD threshold is then calibrated on validation alone."""
    path = snapshot_folder / "train_index.json"
    episodes = [row["episode"] for row in json.loads(path.read_text())] if path.exists() else []
    return episodes if len(episodes) == count else None


def fit_ood(folder, config: ResNetConfig, train: dict, val: dict, snapshot_folder) -> OodStats:
    """The best model's out-of-distribution statistics and evaluation panel, written beside it."""
    from .checkpoint import load_checkpoint
    from .ood import ood_fit_folder

    model, _ = load_checkpoint(folder, str(pick_device(config.device)))  # the training device: a GPU if it had one
    train_images = stack_images(train["images"], config.image_size)
    val_images = stack_images(val["images"], config.image_size)
    return ood_fit_folder(
        folder, model, train_images, train["labels"], val_images, train_episodes(snapshot_folder, len(train["labels"]))
    )
