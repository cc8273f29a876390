"""Model families the inference worker can serve, keyed by TrainedModel.kind. No Django.

A loader takes a `ModelSpec` (the checkpoint's local folder, its config, the device) and returns an
object with `score(batch: np.ndarray) -> list` (one JSON-serialisable result per item along axis 0).
The ResNet family is built in. Another family registers itself from its own module:

    # inference/vlm_scorer.py
    from inference.scorers import register
    register("vlm", load_vlm_scorer)

When the worker meets a kind nobody registered yet it imports `inference.<kind>_scorer` once, so a
family's module only has to exist.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class Scorer(Protocol):
    def score(self, batch: np.ndarray) -> list[Any]: ...


@dataclass(frozen=True)
class ModelSpec:
    kind: str
    folder: Path
    config: dict = field(default_factory=dict)
    device: str = "cpu"


Loader = Callable[[ModelSpec], Scorer]
_LOADERS: dict[str, Loader] = {}


class UnknownModelKind(LookupError):
    pass


def register(kind: str, loader: Loader) -> None:
    _LOADERS[kind] = loader


def load_scorer(spec: ModelSpec) -> Scorer:
    loader = _LOADERS.get(spec.kind)
    if loader is None:
        module = f"inference.{spec.kind}_scorer"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the family's module exists but needs something missing
                raise
        loader = _LOADERS.get(spec.kind)
    if loader is None:
        raise UnknownModelKind(f"no scorer registered for model kind {spec.kind!r}")
    return loader(spec)


class ResNetScorer:
    """The RLinf ResNet reward classifier: uint8 [B,H,W,3] -> success probability per image."""

    def __init__(self, spec: ModelSpec):
        from training.resnet.checkpoint import load_checkpoint, predict_proba

        self.model, self.config = load_checkpoint(spec.folder, spec.device)
        self._predict = predict_proba

    def score(self, batch: np.ndarray) -> list[float]:
        if batch.ndim != 4 or batch.shape[-1] != 3 or batch.dtype != np.uint8:
            raise ValueError(f"ResNet scorer takes uint8 [B,H,W,3], got {batch.dtype} {list(batch.shape)}")
        return [float(p) for p in np.asarray(self._predict(self.model, batch)).reshape(-1)]


register("resnet", ResNetScorer)
