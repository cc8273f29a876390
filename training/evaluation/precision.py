"""Inference precision, a deployment setting (no torch, no Django): the names a deployment stores and what each
means. `training.resnet.placement` turns a name into a dtype and checks the device can run it."""

from __future__ import annotations

FP32 = "fp32"
BF16 = "bf16"
FP16 = "fp16"
PRECISIONS = (FP32, BF16, FP16)
CHOICES = [
    (FP32, "fp32 (exact; the default)"),
    (BF16, "bf16 (GPUs since Ampere, and CPUs)"),
    (FP16, "fp16 (GPUs)"),
]
# Families whose scorer honours the setting; the VLM loads in its checkpoint's dtype (bf16 on GPUs).
HONOURED_BY = ("resnet",)


class PrecisionError(ValueError):
    """A precision the family or the device cannot serve; the message says what to choose instead."""


def precision_check(kind: str, precision: str) -> None:
    """Refuse an unknown name, or a reduced precision for a family that does not honour the setting."""
    if precision not in PRECISIONS:
        raise PrecisionError(f"inference_precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision != FP32 and kind not in HONOURED_BY:
        raise PrecisionError(
            f"inference_precision {precision} applies to ResNet models; a {kind} model serves in the dtype "
            "its checkpoint loads with (bf16 on GPUs): leave it fp32"
        )
