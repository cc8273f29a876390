"""The data each front-end page gets from the server, described once.

A page's view embeds a dict with `json_script` (id `page-data`); its script reads it with `pageData<T>()`.
The shapes are the TypedDicts below: views annotate what they build with them (mypy checks the server
side), `scripts/page_types.py` writes `frontend/src/generated/page-data.ts` from them (tsc checks the
pages), and tests/webapp/test_page_data.py checks that the generated file is current and that every
page's embedded JSON is exactly what its TypedDict describes.

Plain typing only (no Django), so the generator runs without settings. The TypedDicts come from
typing_extensions because pydantic, which validates them in the tests, needs that on Python 3.11.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

from training.evaluation import EvaluationSummary

# ---- labeling -------------------------------------------------------------------------------------------


class ProjectPageData(TypedDict):
    """The project page (labeling/templates/labeling/project_detail.html)."""

    project: int
    api: str


class LabelingEpisode(TypedDict):
    uuid: str
    source: str
    env_id: str
    success: bool | None
    status: str
    num_steps: int


class LabelingProject(TypedDict):
    id: int
    name: str
    cameras: list[str]
    window_size: int
    stride: int


class LabelingSteps(TypedDict):
    """Per-step arrays, one entry per step in index order."""

    index: list[int]
    reward: list[float]
    score: list[float | None]
    success: list[bool]
    action: list[Any]


class LabelingFrameLabels(TypedDict):
    human: list[str | None]
    proposal: list[str | None]
    proposal_status: list[str | None]


class LabelingWindow(TypedDict):
    start: int
    end: int
    value: str
    source: str
    status: str
    score: float | None


class EpisodeLinks(TypedDict):
    project: str
    newer: str | None
    older: str | None


class EpisodeLabelingData(TypedDict):
    """The labeling page's episode (also the answer of GET /api/episodes/<uuid>/labeling, without links)."""

    episode: LabelingEpisode
    project: LabelingProject
    steps: LabelingSteps
    frames: dict[str, list[str | None]]
    frame_labels: LabelingFrameLabels
    windows: list[LabelingWindow]
    links: NotRequired[EpisodeLinks]


# ---- training ---------------------------------------------------------------------------------------------


class TrainingPageData(TypedDict):
    """The project's training page: the job form's defaults per model kind."""

    project: int
    default_configs: dict[str, dict[str, Any] | None]


class JobState(TypedDict):
    """A training job as the job page and its WebSocket show it."""

    job: int
    kind: str
    status: str
    cancel_requested: bool
    progress: float
    eta_seconds: float | None
    error: str
    log: str
    summary: dict[str, Any]
    models: list[int]
    epochs: int | None


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
    id: int
    number: int


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


class EvaluationPageData(TypedDict):
    """The evaluation page: one model, or two side by side."""

    mode: Literal["single", "compare"]
    evaluations: list[ModelEvaluation]


# ---- inference --------------------------------------------------------------------------------------------


class WindowRates(TypedDict):
    """Counts and rates of served frames (rates are None without frames to divide by)."""

    frames: int
    env_flagged: int
    false_success_rate: float | None
    false_fail_rate: float | None
    model_success_rate: float | None


class MonitorState(WindowRates):
    """The alarm and the current window's rates."""

    alarm: bool
    alarm_since: str | None
    alarm_false_success_rate: float | None
    alarm_run: str
    false_success_threshold: float
    hold_s: float
    window_s: float


class MonitorSeries(TypedDict):
    times: list[int]
    frames: list[int]
    false_success_rate: list[float | None]
    false_fail_rate: list[float | None]
    model_success_rate: list[float | None]
    runs: dict[str, WindowRates]
    run_false_success: dict[str, list[float | None]]
    served_histogram: list[int]
    totals: WindowRates


class MonitorSteps(TypedDict):
    steps: list[int]
    frames: list[int]
    model_success_rate: list[float | None]
    env_success_rate: list[float | None]


class MonitorPageData(TypedDict):
    """A deployment's reward-hacking monitor (also the answer of its monitor API)."""

    deployment: str
    status: str
    state: MonitorState
    series: MonitorSeries
    training_histogram: list[int] | None
    steps: MonitorSteps
    bins: int


class TeleopDashboardData(TypedDict):
    """The live teleop dashboard of one session."""

    session: int
    wsPath: str
    cameras: list[str]
    threshold: float
    deployment: str
    labelUrl: str
    hz: float


# page script (frontend/src/pages/<name>.ts) -> the data its template embeds
PAGES: dict[str, type] = {
    "projects": ProjectPageData,
    "labeling": EpisodeLabelingData,
    "training": TrainingPageData,
    "job": JobPageData,
    "evaluation": EvaluationPageData,
    "monitor": MonitorPageData,
    "teleop_dashboard": TeleopDashboardData,
}
