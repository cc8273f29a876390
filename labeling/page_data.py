"""What the labeling pages embed for their scripts (json_script, id `page-data`): see webapp/page_data.py."""

from __future__ import annotations

from typing import Any, NotRequired

from typing_extensions import TypedDict  # pydantic (tests) needs typing_extensions' TypedDict on 3.11


class ProjectPageData(TypedDict):
    """The project page (labeling/templates/labeling/project_detail.html)."""

    project: int
    api: str


class ProposalJobPageData(TypedDict):
    """A project-wide proposal generation's page (labeling/templates/labeling/proposal_job.html)."""

    job: int


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
