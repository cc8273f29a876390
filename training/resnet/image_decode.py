"""Packed compressed frames (`training.resnet.wire`) to a uint8 [B,H,W,3] batch on the scorer's device (no Django).

On CUDA, JPEGs are decoded on the GPU in one batched call (`torchvision.io.decode_jpeg(..., device="cuda")`, nvJPEG),
so the host copies compressed bytes only; PNGs (torchvision has no GPU PNG decoder) and everything on the CPU are
decoded by torchvision on the CPU. Every frame must decode to the size its record states (its header's, checked
against the pixel budgets before it was packed).
"""

from __future__ import annotations

import torch
from torchvision.io import ImageReadMode, decode_image, decode_jpeg

from .wire import JPEG_START, EncodedImage


def jpeg_on_device(device: torch.device) -> bool:
    """Whether JPEGs decode on the device itself (CUDA's nvJPEG) rather than on the CPU."""
    return device.type == "cuda"


def decode_batch(images: list[EncodedImage], device: torch.device) -> torch.Tensor:
    if len({(i.height, i.width) for i in images}) != 1:
        raise ValueError("all images of a batch must share one size")
    encoded = [torch.frombuffer(bytearray(i.data), dtype=torch.uint8) for i in images]
    decoded: list[torch.Tensor | None] = [None] * len(images)
    jpegs = [k for k, i in enumerate(images) if i.data.startswith(JPEG_START)]
    if jpegs and jpeg_on_device(device):
        on_device = decode_jpeg([encoded[k] for k in jpegs], mode=ImageReadMode.RGB, device=device)
        for k, image in zip(jpegs, on_device, strict=True):
            decoded[k] = image
    for k, image in enumerate(decoded):
        if image is None:
            decoded[k] = decode_image(encoded[k], mode=ImageReadMode.RGB).to(device)
    for k, (image, expected) in enumerate(zip(decoded, images, strict=True)):
        assert image is not None
        if tuple(image.shape[1:]) != (expected.height, expected.width):
            raise ValueError(
                f"image {k} decodes to {image.shape[2]}x{image.shape[1]}, its record says {expected.width}x{expected.height}"
            )
    return torch.stack([image for image in decoded if image is not None]).permute(0, 2, 3, 1)
