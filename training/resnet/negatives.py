"""Synthetic fail frames for training (no Django): what a dropped or covered camera sends (black, white, one
colour) and what a broken one sends (noise, fine and coarse). Mixed into the training split only when the job's
`synthetic_negatives` asks, so the reward learns that such frames are not success; the model, its checkpoint and
RLinf's view of it are unchanged (training.resnet.rlinf_match), and the OOD statistics are still fitted on the
real training frames only (training.resnet.runner.fit_ood)."""

from __future__ import annotations

import torch

KINDS = ("black", "white", "constant colour", "uniform noise", "coarse noise", "grey noise")


def synthetic_negatives(count: int, height: int, width: int, *, seed: int = 0) -> torch.Tensor:
    """`count` uint8 [count, H, W, 3] frames, the KINDS in turn, each with its own random colour or noise."""
    generator = torch.Generator().manual_seed(seed)
    frames = torch.empty((count, height, width, 3), dtype=torch.uint8)
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        if kind == "black":
            frames[i] = 0
        elif kind == "white":
            frames[i] = 255
        elif kind == "constant colour":
            frames[i] = torch.randint(0, 256, (3,), generator=generator, dtype=torch.uint8)
        elif kind == "uniform noise":
            frames[i] = torch.randint(0, 256, (height, width, 3), generator=generator, dtype=torch.uint8)
        elif kind == "coarse noise":  # blocks of 8x8 pixels: noise at the scale of objects, not of pixels
            blocks = torch.randint(0, 256, ((height + 7) // 8, (width + 7) // 8, 3), generator=generator)
            frames[i] = blocks.repeat_interleave(8, 0).repeat_interleave(8, 1)[:height, :width].to(torch.uint8)
        else:
            noise = 128 + 40 * torch.randn((height, width, 3), generator=generator)
            frames[i] = noise.round().clamp(0, 255).to(torch.uint8)
    return frames


def with_synthetic_negatives(
    images: torch.Tensor, labels: torch.Tensor, fraction: float, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The training images and labels with round(fraction x N) synthetic fail frames appended (on the images'
    device), and how many were added."""
    count = round(fraction * len(images)) if fraction > 0 else 0
    if count == 0:
        return images, labels, 0
    frames = synthetic_negatives(count, images.shape[1], images.shape[2], seed=seed).to(images.device)
    zeros = torch.zeros(count, dtype=labels.dtype, device=labels.device)
    return torch.cat([images, frames]), torch.cat([labels, zeros]), count
