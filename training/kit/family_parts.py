"""What every model family provides, as types (no Django): the registry in `training.families` holds one of
each per family, and jobs, inference workers and pages only ever talk to a family through these.

- A config class: `from_dict(data)` (ValueError with a clear message when `data` is unusable), `to_dict()`,
  and a no-argument constructor giving the defaults.
- A trainer: `trainer(job, reporter) -> RunResult`. It reads the job's snapshot files, trains, writes its
  checkpoint under `job.checkpoint_folder` (storage-relative), calls `reporter.should_cancel()` between
  batches (raising `JobCancelled`) and returns what to register as a TrainedModel.
- A scorer loader: `scorer(ModelSpec) -> Scorer`, where `Scorer.score(batch)` returns one JSON-serialisable
  result per item along axis 0 of the uint8 batch the inference broker carries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .reporting import Reporter


@dataclass
class RunResult:
    checkpoint_path: str  # storage-relative folder registered as the TrainedModel
    metrics: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    name: str = ""


@dataclass(frozen=True)
class ModelSpec:
    """A trained model as a scorer loader sees it: its checkpoint's local folder, its config, the device, and
    the deployment's inference precision (`training.evaluation.precision`; the families in its HONOURED_BY use it)."""

    kind: str
    folder: Path
    config: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    precision: str = "fp32"


class Scorer(Protocol):
    def score(self, batch: npt.NDArray[np.uint8]) -> list[Any]: ...


class FamilyConfig(Protocol):
    def __init__(self) -> None: ...

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FamilyConfig: ...

    def to_dict(self) -> dict[str, Any]: ...


Trainer = Callable[[Any, Reporter], RunResult]  # (TrainingJob, reporter) -> what to register
ScorerLoader = Callable[[ModelSpec], Scorer]
