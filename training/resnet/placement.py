"""Where and how the ResNet scorer runs (no Django): device, precision, memory format, host-to-device copies.

On CUDA the backbone runs in `channels_last` (cuDNN's fast layout for convolutions), and batches go through a
pinned host buffer with a non-blocking copy, so the copy runs by DMA while the CPU queues the forward. On the
CPU none of that applies: the batch is used where it lies. The precision (`training.evaluation.precision`) casts the
backbone; preprocessing (uint8 to float, resize, ImageNet normalisation) stays in fp32 and the logits come
back as fp32, so only the network's own arithmetic is reduced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from training.evaluation.precision import BF16, FP16, FP32, PrecisionError

from .model import RewardResNet

DTYPES = {FP32: torch.float32, BF16: torch.bfloat16, FP16: torch.float16}


@dataclass(frozen=True)
class Placement:
    device: torch.device
    dtype: torch.dtype
    pinned: bool  # batches staged in pinned host memory and copied with non_blocking=True
    channels_last: bool


def placement_for(device: str | torch.device, precision: str = FP32) -> Placement:
    """The placement a scorer uses on `device` at `precision`; pinned copies and channels_last only on CUDA."""
    device = torch.device(device)
    if precision not in DTYPES:
        raise PrecisionError(f"inference_precision must be one of {', '.join(DTYPES)}, got {precision!r}")
    cuda = device.type == "cuda"
    return Placement(device, DTYPES[precision], pinned=cuda, channels_last=cuda)


def device_check(placement: Placement) -> None:
    """Refuse, with what to choose instead, a precision this device (and this PyTorch) cannot run: fp16 on the
    CPU, bf16 on a GPU without it, and whatever fails one convolution and one matrix product in that dtype on
    the device (the ResNet's two kinds of layer)."""
    if placement.dtype == torch.float32:
        return
    name = next(k for k, v in DTYPES.items() if v == placement.dtype)
    device = placement.device
    if device.type == "cpu" and placement.dtype == torch.float16:
        raise PrecisionError(
            "fp16 on the CPU has no fast kernels in PyTorch (a ResNet18 forward ran about 18 times slower than "
            "fp32 here): deploy with bf16 or fp32 for a CPU worker, or serve fp16 from a GPU worker"
        )
    if device.type == "cuda" and placement.dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise PrecisionError(f"{device} has no bf16 support (GPUs since Ampere have it): deploy with fp16 or fp32")
    try:
        with torch.inference_mode():
            x = torch.ones(1, 3, 8, 8, device=device, dtype=placement.dtype)
            F.conv2d(x, torch.ones(4, 3, 3, 3, device=device, dtype=placement.dtype))
            torch.ones(2, 4, device=device, dtype=placement.dtype) @ torch.ones(
                4, 2, device=device, dtype=placement.dtype
            )
    except (RuntimeError, NotImplementedError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise PrecisionError(
            f"{name} inference does not run on {device} with this PyTorch ({first}): deploy with fp32"
            + (" or bf16" if device.type == "cpu" else "")
        ) from None


def model_place(model: RewardResNet, placement: Placement) -> RewardResNet:
    """The model on the placement's device, its backbone in the placement's dtype and memory format, in eval mode.
    The mean/std buffers stay fp32: preprocessing runs in fp32 (RewardResNet.forward casts to the backbone)."""
    device_check(placement)
    model = model.to(placement.device).eval()
    model.backbone.to(placement.dtype)
    if placement.channels_last:
        model.backbone.to(memory_format=torch.channels_last)
    return model


class HostStaging:
    """Host batches onto the placement's device. On CUDA one pinned buffer, grown to the largest batch seen and
    reused, takes each batch before a non-blocking copy; reuse is safe because every batch's results are read
    back (a synchronising copy) before the next batch is staged. On the CPU a batch is used where it lies."""

    def __init__(self, placement: Placement):
        self.placement = placement
        self._buffer: torch.Tensor | None = None

    def to_device(self, images: np.ndarray) -> torch.Tensor:
        host = torch.from_numpy(np.ascontiguousarray(images))
        if not self.placement.pinned:
            return host.to(self.placement.device)
        if self._buffer is None or self._buffer.dtype != host.dtype or self._buffer.numel() < host.numel():
            self._buffer = torch.empty(host.numel(), dtype=host.dtype, pin_memory=True)
        staged = self._buffer[: host.numel()].view(host.shape)
        staged.copy_(host)
        return staged.to(self.placement.device, non_blocking=True)
