"""A scorer that answers at once, for benches only (no Django): what `bench/serving_overhead.py` deploys to
measure the service's own cost per request and per image, with no forward pass hiding it.

Each image's "probability" is its first pixel's red value / 255: deterministic, different per frame (so a
bench can check that every image reached the worker in order) and one byte read per image. The batch goes
through `torch.from_numpy` as a real model's input does, so the worker's bytes -> tensor path is the one a
ResNet deployment takes.

Never offered to users: it is no `ModelKind` choice (admin, API and forms), and `training.families` loads it
only in a process started with BENCH_MODELS=1.
"""

from __future__ import annotations

import warnings

import numpy as np
import numpy.typing as npt

from ..family_parts import ModelSpec

KIND = "instant"


class InstantScorer:
    def __init__(self, spec: ModelSpec):
        self.device = spec.device

    def score(self, batch: npt.NDArray[np.uint8]) -> list[float]:
        import torch

        if batch.ndim != 4 or batch.shape[-1] != 3 or batch.dtype != np.uint8:
            raise ValueError(f"the instant scorer takes uint8 [B,H,W,3], got {batch.dtype} {list(batch.shape)}")
        with warnings.catch_warnings():  # a view of the received bytes is read-only, and only read here
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            images = torch.from_numpy(batch)
        return (images[:, 0, 0, 0].to(torch.float32) / 255.0).tolist()


def instant_probabilities(batch: npt.NDArray[np.uint8]) -> list[float]:
    """What the instant scorer answers for `batch` (benches and tests check served results against it)."""
    return (batch[:, 0, 0, 0].astype(np.float32) / np.float32(255)).tolist()
