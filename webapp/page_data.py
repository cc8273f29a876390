"""The data each front-end page gets from the server, described once.

A page's view embeds a dict with `json_script` (id `page-data`); its script reads it with
`pageData("<page>")`. The shapes are TypedDicts, each app's in its own `page_data.py` (the inference
pages' below until inference/ is split into its rooms); PAGES maps each page script to its shape.
Views build their data with these TypedDicts (mypy checks the server side), `scripts/page_types.py`
writes `frontend/src/generated/page-data.ts` from PAGES (tsc checks the pages), and
tests/webapp/test_page_data.py checks that the generated file is current and that every page's
embedded JSON is exactly what its TypedDict describes.

Plain typing only (no Django), so the generator runs without settings. The TypedDicts come from
typing_extensions because pydantic, which validates them in the tests, needs that on Python 3.11.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from labeling.page_data import EpisodeLabelingData, ProjectPageData, ProposalJobPageData
from training.page_data import EvaluationPageData, JobPageData, RunsPageData, TrainingPageData

# ---- inference (its pages' views do not use these yet) ---------------------------------------------------


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
    ood_frames: list[int]  # frames flagged off-distribution per point
    ood_rate: list[float | None]  # of the frames checked (None: none checked; a model without OOD statistics)
    ood_total: int
    ood_checked: int


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
    "proposal_job": ProposalJobPageData,
    "training": TrainingPageData,
    "job": JobPageData,
    "evaluation": EvaluationPageData,
    "runs": RunsPageData,
    "monitor": MonitorPageData,
    "teleop_dashboard": TeleopDashboardData,
}
