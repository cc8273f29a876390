"""Proposals: machine-made labels people accept or reject, always stored apart from human labels.

- Frame proposals come from the env's per-step success flag (success when set, else fail).
- Window proposals come from the trend rule (labeling/proposals/trend.py) with the project's parameters; each
  stores its delta as `score` and the parameters that produced it in `params`.

Accepting writes the proposal's value as the human label (overwriting one that differs) and marks the
proposal accepted; rejecting marks it rejected; reopening makes it open again (for undo).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Count, Q, QuerySet

from projects.models import Project

from ..labels.services import (
    Actor,
    FrameEdit,
    WindowEdit,
    frame_history_append,
    frame_labels_set,
    window_history_append,
    window_labels_set,
)
from ..models import Episode, FrameLabel, LabelChange, LabelSource, ProposalStatus, Step, WindowLabel
from ..table_stats import LABEL_TABLES, refresh_after_bulk_write
from .trend import TrendParams, TrendWindow, trend_windows

KINDS = ("frame", "window", "all")
FRAME_RULE = {"rule": "env_success"}


@dataclass
class GenerateResult:
    episodes: int = 0
    frames_created: int = 0
    frames_updated: int = 0
    windows_created: int = 0
    windows_updated: int = 0
    windows_removed: int = 0

    @property
    def rows_written(self) -> int:
        return (
            self.frames_created
            + self.frames_updated
            + self.windows_created
            + self.windows_updated
            + self.windows_removed
        )


def proposals_generate(
    *,
    project: Project,
    episodes: QuerySet[Episode] | None = None,
    on_episode: Callable[[GenerateResult], bool] | None = None,
) -> GenerateResult:
    """(Re)compute proposals for the project's episodes. Unchanged proposals keep their status.

    Each episode is one transaction; `on_episode` is told the running counts after each and stops the
    loop by returning False (a cancelled job keeps the episodes it finished). A run over the whole project
    that wrote many rows leaves the label tables' statistics fresh (labeling/table_stats.py)."""
    params = TrendParams(**project.trend_params())
    result = GenerateResult()
    whole_project = episodes is None
    episodes = project.episodes.all() if episodes is None else episodes.filter(project=project)
    for episode in episodes.order_by("pk"):
        with transaction.atomic():
            _episode_generate(episode=episode, project=project, params=params, result=result)
        result.episodes += 1
        if on_episode is not None and not on_episode(result):
            break
    if whole_project:  # a job's run, not one episode's answer to a request
        refresh_after_bulk_write(LABEL_TABLES, rows=result.rows_written)
    return result


@dataclass(frozen=True, slots=True)
class _StepRow:
    """What proposals read of a step: its ids, the scores the trend rule reads, its env success, and how
    many of the project's cameras it has a frame for."""

    pk: int
    index: int
    reward: float
    score: float | None
    env_success: bool
    n_views: int


def _episode_generate(*, episode: Episode, project: Project, params: TrendParams, result: GenerateResult) -> None:
    # Concurrent generations of one episode (two people opening it at once) take turns on the episode row.
    Episode.objects.select_for_update().filter(pk=episode.pk).first()
    steps = _proposal_steps(episode=episode, project=project)
    if not steps:
        return
    _frame_proposals_write(episode=episode, project=project, steps=steps, result=result)
    _window_proposals_write(episode=episode, project=project, steps=steps, params=params, result=result)


def _proposal_steps(*, episode: Episode, project: Project) -> list[_StepRow]:
    rows = (
        Step.objects.filter(episode=episode)
        .order_by("index")
        .annotate(n_views=Count("frames", filter=Q(frames__camera__in=project.camera_views)))
        .values_list("pk", "index", "reward", "score", "env_success", "n_views")
    )
    return [_StepRow(*row) for row in rows]


def _frame_proposals_write(
    *, episode: Episode, project: Project, steps: list[_StepRow], result: GenerateResult
) -> None:
    """One frame proposal per step from its env success: new ones created, changed ones reopened, each change
    in the history."""
    existing = {
        step_id: (pk, value)
        for pk, step_id, value in FrameLabel.objects.filter(episode=episode, source=LabelSource.PROPOSAL).values_list(
            "pk", "step_id", "value"
        )
    }
    new_rows, changed, edits = [], [], []
    for step in steps:
        value = FrameLabel.Value.SUCCESS if step.env_success else FrameLabel.Value.FAIL
        if step.pk not in existing:
            new_rows.append(
                FrameLabel(
                    project=project,
                    episode=episode,
                    step_id=step.pk,
                    value=value,
                    source=LabelSource.PROPOSAL,
                    params=FRAME_RULE,
                )
            )
            edits.append(FrameEdit(step.index, None, value))
        elif existing[step.pk][1] != value:
            changed.append(FrameLabel(pk=existing[step.pk][0], value=value, status=ProposalStatus.OPEN))
            edits.append(FrameEdit(step.index, existing[step.pk][1], value))
    FrameLabel.objects.bulk_create(new_rows, batch_size=1000)
    FrameLabel.objects.bulk_update(changed, ["value", "status"], batch_size=1000)
    frame_history_append(
        episode=episode, edits=edits, actor=Actor(), action=LabelChange.Action.PROPOSE, source=LabelSource.PROPOSAL
    )
    result.frames_created += len(new_rows)
    result.frames_updated += len(changed)


def _window_proposals_write(
    *, episode: Episode, project: Project, steps: list[_StepRow], params: TrendParams, result: GenerateResult
) -> None:
    """The trend rule's windows as window proposals: new ones created, changed ones updated (reopened when
    their value changes), open ones the rule no longer finds removed; each value change in the history."""
    windows, base = _trend_windows_of(steps=steps, project=project, params=params)
    existing = {(w.start, w.end): w for w in WindowLabel.objects.filter(episode=episode, source=LabelSource.PROPOSAL)}
    new_rows, changed, edits = [], [], []
    for w in windows:
        w_params = {**base, "start_score": w.start_score, "end_score": w.end_score, "tail": w.tail}
        row = existing.pop((w.start, w.end), None)
        if row is None:
            new_rows.append(
                WindowLabel(
                    project=project,
                    episode=episode,
                    start=w.start,
                    end=w.end,
                    value=w.label,
                    source=LabelSource.PROPOSAL,
                    score=w.delta,
                    params=w_params,
                )
            )
            edits.append(WindowEdit(w.start, w.end, None, w.label))
        elif row.value != w.label or row.params != w_params or row.score != w.delta:
            if row.value != w.label:
                row.status = ProposalStatus.OPEN
                edits.append(WindowEdit(w.start, w.end, row.value, w.label))
            row.value, row.score, row.params = w.label, w.delta, w_params
            changed.append(row)
    stale = [row.pk for row in existing.values() if row.status == ProposalStatus.OPEN]
    WindowLabel.objects.filter(pk__in=stale).delete()
    WindowLabel.objects.bulk_create(new_rows, batch_size=1000)
    WindowLabel.objects.bulk_update(changed, ["value", "score", "params", "status"], batch_size=1000)
    window_history_append(
        episode=episode, edits=edits, actor=Actor(), action=LabelChange.Action.PROPOSE, source=LabelSource.PROPOSAL
    )
    result.windows_created += len(new_rows)
    result.windows_updated += len(changed)
    result.windows_removed += len(stale)


def _trend_windows_of(
    *, steps: list[_StepRow], project: Project, params: TrendParams
) -> tuple[list[TrendWindow], dict[str, Any]]:
    """The trend rule's windows over the episode's scores, and the parameters every window proposal stores.
    Score per step: the stored trend score (RLinf's gae) when present, else the env reward."""
    scores = [s.score if s.score is not None else s.reward for s in steps]
    with_score = sum(s.score is not None for s in steps)
    score_source = "score" if with_score == len(steps) else "reward" if with_score == 0 else "score+reward"
    windows = trend_windows(
        scores,
        params,
        indices=[s.index for s in steps],
        complete=[s.n_views >= len(project.camera_views) for s in steps],
    )
    return windows, {**params.as_dict(), "rule": "trend", "score_source": score_source}


@dataclass
class DecisionResult:
    frames: int = 0
    windows: int = 0
    # Human labels before an accept, per episode UUID: what undo restores.
    previous_frames: dict[str, list[dict]] = field(default_factory=dict)
    previous_windows: dict[str, list[dict]] = field(default_factory=dict)


def _selected(
    model,
    *,
    project: Project,
    episode: Episode | None,
    start: int | None,
    end: int | None,
    statuses: list[str],
):
    rows = model.objects.filter(project=project, source=LabelSource.PROPOSAL, status__in=statuses)
    if episode is not None:
        rows = rows.filter(episode=episode)
    if model is FrameLabel:
        if start is not None:
            rows = rows.filter(step__index__gte=start)
        if end is not None:
            rows = rows.filter(step__index__lte=end)
    else:  # windows wholly inside the range
        if start is not None:
            rows = rows.filter(start__gte=start)
        if end is not None:
            rows = rows.filter(end__lte=end)
    return rows


def proposals_accept(
    *,
    project: Project,
    kind: str,
    actor: Actor,
    episode: Episode | None = None,
    start: int | None = None,
    end: int | None = None,
) -> DecisionResult:
    """Accept open proposals: their values become the human labels; they are marked accepted."""
    result = DecisionResult()
    scope: dict[str, Any] = {
        "project": project,
        "episode": episode,
        "start": start,
        "end": end,
        "statuses": [ProposalStatus.OPEN],
    }
    with transaction.atomic():
        if kind in ("frame", "all"):
            rows = _selected(FrameLabel, **scope).select_for_update(of=("self",))
            per_episode: dict[int, list[tuple[int, str]]] = defaultdict(list)
            ids = []
            for pk, episode_id, index, value in rows.values_list("pk", "episode_id", "step__index", "value"):
                per_episode[episode_id].append((index, value))
                ids.append(pk)
            for ep in Episode.objects.filter(pk__in=per_episode):
                edits = frame_labels_set(
                    episode=ep, items=per_episode[ep.pk], actor=actor, action=LabelChange.Action.ACCEPT
                )
                if edits:
                    result.previous_frames[str(ep.uuid)] = [{"index": e.index, "value": e.old} for e in edits]
            result.frames = FrameLabel.objects.filter(pk__in=ids).update(status=ProposalStatus.ACCEPTED)
        if kind in ("window", "all"):
            rows = _selected(WindowLabel, **scope).select_for_update()
            per_episode_w: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
            ids = []
            for pk, episode_id, s, e, value in rows.values_list("pk", "episode_id", "start", "end", "value"):
                per_episode_w[episode_id].append((s, e, value))
                ids.append(pk)
            for ep in Episode.objects.filter(pk__in=per_episode_w):
                window_edits = window_labels_set(
                    episode=ep, items=per_episode_w[ep.pk], actor=actor, action=LabelChange.Action.ACCEPT
                )
                if window_edits:
                    result.previous_windows[str(ep.uuid)] = [
                        {"start": e.start, "end": e.end, "value": e.old} for e in window_edits
                    ]
            result.windows = WindowLabel.objects.filter(pk__in=ids).update(status=ProposalStatus.ACCEPTED)
    return result


def proposals_set_status(
    *,
    project: Project,
    kind: str,
    status: str,
    actor: Actor,
    episode: Episode | None = None,
    start: int | None = None,
    end: int | None = None,
) -> DecisionResult:
    """Reject open proposals (status rejected) or reopen decided ones (status open); human labels stay."""
    if status == ProposalStatus.REJECTED:
        statuses, action = [ProposalStatus.OPEN], LabelChange.Action.REJECT
    else:
        statuses, action = [ProposalStatus.ACCEPTED, ProposalStatus.REJECTED], LabelChange.Action.PROPOSE
    scope: dict[str, Any] = {"project": project, "episode": episode, "start": start, "end": end, "statuses": statuses}
    result = DecisionResult()
    with transaction.atomic():
        if kind in ("frame", "all"):
            rows = _selected(FrameLabel, **scope)
            found = list(
                rows.order_by("episode_id", "step__index").values_list("pk", "episode_id", "step__index", "value")
            )
            result.frames = FrameLabel.objects.filter(pk__in=[r[0] for r in found]).update(status=status)
            for ep in Episode.objects.filter(pk__in={r[1] for r in found}):
                edits = [FrameEdit(i, v, v) for _pk, e, i, v in found if e == ep.pk]
                frame_history_append(episode=ep, edits=edits, actor=actor, action=action, source=LabelSource.PROPOSAL)
        if kind in ("window", "all"):
            rows = _selected(WindowLabel, **scope)
            found_w = list(
                rows.order_by("episode_id", "start").values_list("pk", "episode_id", "start", "end", "value")
            )
            result.windows = WindowLabel.objects.filter(pk__in=[r[0] for r in found_w]).update(status=status)
            for ep in Episode.objects.filter(pk__in={r[1] for r in found_w}):
                edits_w = [WindowEdit(s, e, v, v) for _pk, epk, s, e, v in found_w if epk == ep.pk]
                window_history_append(
                    episode=ep, edits=edits_w, actor=actor, action=action, source=LabelSource.PROPOSAL
                )
    return result
