"""Images per second of Reward Studio's ResNet training loop beside a bare PyTorch loop, same run.

Both loops train the same model (same config and initial weights) on the same in-memory uint8 tensors
with the same batch size, optimiser and threads. The project loop is `train_reward_model` end to end
(shuffling, batch selection, reporting, per-epoch validation on a small split and best/last
checkpoints); the bare loop is forward, loss, backward, clip, step. Resume states are saved on the clock training jobs
use (TRAINING_CHECKPOINT_SECONDS' default). Target: ratio >= 0.95.

    .venv/bin/python bench/train.py [--size 64] [--n 512] [--batch 32] [--epochs 2] [--threads 2] [--device auto]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from training.reporting import MemoryReporter  # noqa: E402
from training.resnet.config import ResNetConfig  # noqa: E402
from training.resnet.model import RewardResNet  # noqa: E402
from training.resnet.train import pick_device, train_reward_model  # noqa: E402
from training.synthetic import make_scenes  # noqa: E402

TARGET = 0.95
CHECKPOINT_SECONDS = 300.0  # TRAINING_CHECKPOINT_SECONDS' default, as training jobs run the loop


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def bare_loop(config: ResNetConfig, images: torch.Tensor, labels: torch.Tensor, device: torch.device) -> float:
    torch.manual_seed(config.seed)
    model = RewardResNet(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    x, y = images.to(device), labels.to(device)
    sync(device)
    start = time.perf_counter()
    for _ in range(config.epochs):
        order = torch.randperm(len(x), device=device)
        for begin in range(0, len(x), config.batch_size):
            index = order[begin : begin + config.batch_size]
            loss = F.binary_cross_entropy_with_logits(model(x[index]), y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
    sync(device)
    return len(x) * config.epochs / (time.perf_counter() - start)


def project_loop(config, images, labels, val_images, val_labels, device) -> float:
    with tempfile.TemporaryDirectory() as out:
        sync(device)
        start = time.perf_counter()
        train_reward_model(
            config,
            images,
            labels.tolist(),
            val_images,
            val_labels.tolist(),
            out_dir=out,
            reporter=MemoryReporter(),
            checkpoint_seconds=CHECKPOINT_SECONDS,
        )
        sync(device)
        return len(images) * config.epochs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--val", type=int, default=32)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="Alternating runs of each loop; the best counts.")
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--augment", action="store_true", help="Also time the project loop with random-crop augmentation."
    )
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    rng = np.random.default_rng(0)
    labels = rng.random(args.n) < 0.4
    val_labels = rng.random(args.val) < 0.4
    images = torch.from_numpy(make_scenes(labels, args.size, seed=1))
    val_images = torch.from_numpy(make_scenes(val_labels, args.size, seed=2))
    y = torch.as_tensor(labels, dtype=torch.float32)
    yv = torch.as_tensor(val_labels, dtype=torch.float32)
    config = ResNetConfig(
        hidden_dim=256,
        image_size=[3, args.size, args.size],
        batch_size=args.batch,
        epochs=args.epochs,
        augment=False,
        warmup_steps=0,
        patience=0,
        num_threads=args.threads,
        device=str(device),
        seed=0,
    )
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), "
        f"threads {args.threads}, {args.n} images {args.size}x{args.size}, batch {args.batch}, epochs {args.epochs}"
    )
    bare_loop(config, images[: args.batch * 2], y[: args.batch * 2], device)  # warm-up (allocator, kernels)
    bare, project, augmented = [], [], []
    for _ in range(args.repeats):
        bare.append(bare_loop(config, images, y, device))
        project.append(project_loop(config, images, y, val_images, yv, device))
        if args.augment:
            aug = ResNetConfig(**{**config.to_dict(), "augment": True})
            augmented.append(project_loop(aug, images, y, val_images, yv, device))
    best_bare, best_project = max(bare), max(project)
    ratio = best_project / best_bare
    print(f"bare PyTorch loop:      {best_bare:8.1f} images/s   (runs: {', '.join(f'{v:.1f}' for v in bare)})")
    print(f"Reward Studio loop:     {best_project:8.1f} images/s   (runs: {', '.join(f'{v:.1f}' for v in project)})")
    if augmented:
        print(f"  with random crop:     {max(augmented):8.1f} images/s   (ratio {max(augmented) / best_bare:.3f})")
    print(f"ratio {ratio:.3f} (target >= {TARGET}) -> {'OK' if ratio >= TARGET else 'BELOW TARGET'}")


if __name__ == "__main__":
    main()
