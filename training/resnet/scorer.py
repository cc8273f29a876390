"""The ResNet family's scorer for the inference workers (no Django): the RLinf ResNet reward classifier,
uint8 [B, H, W, 3] images in, one success probability per image out. Device, precision, memory format and
host-to-device copies follow `training.resnet.placement`."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..family_parts import ModelSpec
from .checkpoint import load_checkpoint
from .model import predict_proba
from .placement import HostStaging, model_place, placement_for


class ResNetScorer:
    def __init__(self, spec: ModelSpec):
        self.placement = placement_for(spec.device, spec.precision)
        model, self.config = load_checkpoint(spec.folder, "cpu")
        self.model = model_place(model, self.placement)
        self.staging = HostStaging(self.placement)

    def score(self, batch: npt.NDArray[np.uint8]) -> list[float]:
        if batch.ndim != 4 or batch.shape[-1] != 3 or batch.dtype != np.uint8:
            raise ValueError(f"ResNet scorer takes uint8 [B,H,W,3], got {batch.dtype} {list(batch.shape)}")
        probabilities = predict_proba(self.model, batch, to_device=self.staging.to_device)
        return [float(p) for p in np.asarray(probabilities).reshape(-1)]
