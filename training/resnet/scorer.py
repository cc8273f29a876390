"""The ResNet family's scorer for the inference workers (no Django): the RLinf ResNet reward classifier,
uint8 [B, H, W, 3] images (or packed JPEG/PNG frames, `training.resnet.wire`, decoded on the device) in, one
success probability per image out (with the model's OOD statistics, `training.resnet.ood`, each item is
`{"probability", "ood", "ood_score"}`, the score over the model's threshold (flagged above 1), scored in the same
forward pass; without them a bare float). Device, precision, memory format and host-to-device copies follow
`training.resnet.placement`."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from ..kit.family_parts import ModelSpec
from .checkpoint import load_checkpoint
from .model import predict_proba
from .ood import FeatureTap, ood_load, ood_scores
from .placement import HostStaging, model_place, placement_for
from .wire import images_unpack, is_packed

DECODE_MAX_PIXELS = 16 * 1024 * 1024  # decoded pixels of compressed frames at once (a chunk holds at least one)


class ResNetScorer:
    def __init__(self, spec: ModelSpec):
        self.placement = placement_for(spec.device, spec.precision)
        model, self.config = load_checkpoint(spec.folder, "cpu")
        self.model = model_place(model, self.placement)
        self.staging = HostStaging(self.placement)
        stats = ood_load(spec.folder)
        self.ood = stats.to(self.placement.device) if stats is not None else None

    def score(self, batch: npt.NDArray[np.uint8]) -> list[float] | list[dict]:
        stats = self.ood
        if stats is None:
            return self._probabilities(batch)
        scores: list[torch.Tensor] = []
        with FeatureTap(self.model) as tap:
            tap.after = lambda kept: scores.append(ood_scores(stats, kept).float().cpu())
            probabilities = self._probabilities(batch)
        values = torch.cat(scores).tolist() if scores else []
        threshold = stats.threshold
        return [
            {"probability": p, "ood": s > threshold, "ood_score": round(s / threshold, 4)}
            for p, s in zip(probabilities, values, strict=True)
        ]

    def _probabilities(self, batch: npt.NDArray[np.uint8]) -> list[float]:
        if is_packed(batch):
            first = images_unpack(batch[:1])[0]
            rows = max(1, min(256, DECODE_MAX_PIXELS // (first.height * first.width)))
            probabilities = predict_proba(self.model, batch, batch_size=rows, to_device=self._decoded)
            return [float(p) for p in probabilities]
        if batch.ndim != 4 or batch.shape[-1] != 3 or batch.dtype != np.uint8:
            raise ValueError(f"ResNet scorer takes uint8 [B,H,W,3], got {batch.dtype} {list(batch.shape)}")
        probabilities = predict_proba(self.model, batch, to_device=self.staging.to_device)
        return [float(p) for p in np.asarray(probabilities).reshape(-1)]

    def _decoded(self, rows: np.ndarray) -> torch.Tensor:
        from .image_decode import decode_batch  # torchvision.io, only where compressed frames come

        return decode_batch(images_unpack(rows), self.placement.device)
