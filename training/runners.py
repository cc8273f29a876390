"""Job kinds: which config class validates a job's config and which runner trains it.

A runner is `run_job(job: TrainingJob, reporter: Reporter) -> RunResult`. It reads the snapshot's files,
trains, writes its checkpoint under `job.checkpoint_folder` (storage-relative) and returns what to
register as a TrainedModel. It calls `reporter.should_cancel()` between batches and raises JobCancelled.
A config class has `from_dict(data)` (raising ValueError with a clear message) and `to_dict()`.
Both are named by import path so a kind's heavy imports (torch, transformers) load only when used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Any


@dataclass(frozen=True)
class KindSpec:
    config_class: str
    runner: str


@dataclass
class RunResult:
    checkpoint_path: str  # storage-relative folder registered as the TrainedModel
    metrics: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    name: str = ""


KINDS: dict[str, KindSpec] = {
    "resnet": KindSpec("training.resnet.config.ResNetConfig", "training.resnet.runner.run_job"),
    "vlm": KindSpec("training.vlm.config.VLMTrainConfig", "training.vlm.runner.run_job"),
}


class UnknownKind(ValueError):
    pass


def _load(path: str) -> Any:
    module, name = path.rsplit(".", 1)
    return getattr(import_module(module), name)


def spec(kind: str) -> KindSpec:
    try:
        return KINDS[kind]
    except KeyError:
        raise UnknownKind(f"unknown job kind {kind!r}; known: {', '.join(sorted(KINDS))}") from None


def config_class(kind: str) -> Any:
    return _load(spec(kind).config_class)


def validate_config(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """The normalised config (defaults filled in); ValueError with the reason when it is unusable."""
    return config_class(kind).from_dict(data).to_dict()


def default_config(kind: str) -> dict[str, Any]:
    return config_class(kind)().to_dict()


def get_runner(kind: str):
    return _load(spec(kind).runner)
