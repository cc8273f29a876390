"""What the training pages embed for their scripts (json_script, id `page-data`): see webapp/page_data.py."""

from __future__ import annotations

from typing import Any, Literal

from typing_extensions import TypedDict  # pydantic (tests) needs typing_extensions' TypedDict on 3.11

from common.jobs.payload import JobProgress
from training.evaluation.metrics import EvaluationSummary, PrecisionDifference


class TrainingPageData(TypedDict):
    """The project's training page: the job form's defaults per model kind."""

    project: int
    default_configs: dict[str, dict[str, Any] | None]


class JobState(JobProgress):
    """A training job as the job page and its WebSocket show it: its progress payload and more."""

    job: int
    kind: str
    cancel_requested: bool
    eta_seconds: float | None
    log: str
    summary: dict[str, Any]
    models: list[int]
    epochs: int | None
    sanity: list[str]  # the sanity check's findings on its ResNet model (empty: passed, or not judged yet)


class JobPageData(TypedDict):
    job: int
    ws: str
    state: JobState


class EvaluationModel(TypedDict):
    id: int
    name: str
    kind: str
    metrics: dict[str, Any]


class EvaluationSnapshot(TypedDict):
    """The snapshot evaluated on: how it split, and (warning, '' if none) whether val shares episodes with train."""

    id: int
    number: int
    split: str
    shared_episodes: int
    split_warning: str


class ValFrame(TypedDict):
    """One frame of a snapshot's validation split: its label, image URL and labeling-page link."""

    episode: str
    step: int
    label: int
    image: str | None
    label_url: str | None


class EvaluationItem(ValFrame):
    """One validation frame, with the model's probability."""

    probability: float


class ModelEvaluation(TypedDict):
    """One model on a snapshot's validation split (also the answer of GET /api/models/<id>/evaluation)."""

    model: EvaluationModel
    snapshot: EvaluationSnapshot
    threshold: float
    probabilities: list[float]
    labels: list[int]
    summary: EvaluationSummary
    items: list[EvaluationItem]
    order: list[int]
    precisions: list[PrecisionDifference]  # bf16 and fp16 against these (fp32) probabilities


class LabelEfficiencyRun(TypedDict):
    """One simulated labeling run of bench/active.py: validation accuracy after each round of labels."""

    order: Literal["ranked", "random"]
    seed: int
    labels: list[int]
    accuracy: list[float]
    needed: int | None  # labels it took to reach the target (None: never)


class LabelEfficiencyData(TypedDict):
    """The project's last label-efficiency measurement (training.LabelEfficiency)."""

    measured_at: str
    command: str
    metric: str
    all_labels_accuracy: float
    target: float
    runs: list[LabelEfficiencyRun]
    ranked_needed: float | None  # mean over the seeds that reached the target
    random_needed: float | None


class EvaluationPageData(TypedDict):
    """The evaluation page: one model, or two side by side; and the project's label efficiency (None:
    not measured yet; the page then says how to measure it)."""

    mode: Literal["single", "compare"]
    evaluations: list[ModelEvaluation]
    label_efficiency: LabelEfficiencyData | None
    label_efficiency_command: str


class RunChoice(TypedDict):
    """A training job the runs page can overlay: its curves come from `metrics` (the job's metrics API)."""

    id: int
    name: str
    status: str
    metrics: str


class RunsPageData(TypedDict):
    """Several runs' curves overlaid: the project's latest jobs and those picked at first."""

    project: int
    runs: list[RunChoice]
    picked: list[int]
    smoothing: float
