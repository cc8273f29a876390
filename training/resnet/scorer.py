"""The ResNet family's scorer for the inference workers (no Django): the RLinf ResNet reward classifier,
uint8 [B, H, W, 3] images in, one success probability per image out."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..kit.family_parts import ModelSpec
from .checkpoint import load_checkpoint
from .model import predict_proba


class ResNetScorer:
    def __init__(self, spec: ModelSpec):
        self.model, self.config = load_checkpoint(spec.folder, spec.device)

    def score(self, batch: npt.NDArray[np.uint8]) -> list[float]:
        if batch.ndim != 4 or batch.shape[-1] != 3 or batch.dtype != np.uint8:
            raise ValueError(f"ResNet scorer takes uint8 [B,H,W,3], got {batch.dtype} {list(batch.shape)}")
        return [float(p) for p in np.asarray(predict_proba(self.model, batch)).reshape(-1)]
