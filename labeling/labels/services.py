"""Writes for human labels: frame success/fail and window positive/negative/unclear.

Every write is one short transaction: labels are upserted or deleted in bulk and each change appends
LabelChange history rows (runs of consecutive frames with the same old and new value share a row).

Concurrent edits: an edit may name the value it was based on (`bases`, per frame or window: what the
editor saw, null for no label). If the stored value differs, someone else changed it meanwhile: nothing
is written and LabelConflict lists each such label with its current value and who set it, so the editor
can decide. An edit without a base keeps the old rule, the last write wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import FilteredRelation, Q
from django.utils import timezone

from projects.models import Agent

from ..models import Episode, FrameLabel, LabelChange, LabelSource, Step, WindowLabel

FRAME_VALUES = {FrameLabel.Value.SUCCESS, FrameLabel.Value.FAIL}
WINDOW_VALUES = {WindowLabel.Value.POSITIVE, WindowLabel.Value.NEGATIVE, WindowLabel.Value.UNCLEAR}


class LabelError(ValueError):
    """A label request that cannot be applied; the message says why (a 400 for the API)."""


@dataclass(frozen=True)
class Conflict:
    """One label that changed since the edit's base: the base, the value now stored and who stored it."""

    start: int
    end: int
    base: str | None
    current: str | None
    by: str


class LabelConflict(LabelError):
    """Labels changed by someone else since the edit was based on them (a 409 for the API)."""

    def __init__(self, conflicts: list[Conflict]):
        self.conflicts = conflicts
        first = conflicts[0]
        where = f"step {first.start}" if first.start == first.end else f"window {first.start}..{first.end}"
        more = f" and {len(conflicts) - 1} more" if len(conflicts) > 1 else ""
        super().__init__(
            f"{where}{more} changed since you saw it ({first.by or 'someone'} set {first.current or 'no label'}); "
            "nothing was saved"
        )


def _who(author_name: str | None, agent_name: str | None) -> str:
    return author_name or (f"agent {agent_name}" if agent_name else "")


@dataclass(frozen=True)
class Actor:
    """Who makes a change: a logged-in person or an agent with a token."""

    user: User | None = None
    agent: Agent | None = None

    @classmethod
    def of(cls, principal) -> Actor:
        if isinstance(principal, Agent):
            return cls(agent=principal)
        if principal is not None and getattr(principal, "is_authenticated", False):
            return cls(user=principal)
        return cls()

    def fields(self) -> dict:
        return {"author": self.user, "agent": self.agent}


@dataclass(frozen=True)
class FrameEdit:
    index: int
    old: str | None
    new: str | None


def frame_labels_set(
    *,
    episode: Episode,
    items: Sequence[tuple[int, str | None]],
    actor: Actor,
    action: str | None = None,
    bases: dict[int, str | None] | None = None,
) -> list[FrameEdit]:
    """Set (or clear, value None) the human frame label of each (step index, value). Returns what changed.

    `action` names the history action (default set/clear; accepting a proposal passes accept). `bases` maps
    step indices to the value the edit was based on; LabelConflict when any of them changed meanwhile."""
    wanted: dict[int, str | None] = {}
    for index, value in items:
        if value is not None and value not in FRAME_VALUES:
            raise LabelError(f"frame label must be success, fail or null, got {value!r}")
        wanted[int(index)] = value
    if not wanted:
        return []
    with transaction.atomic():
        # One query for the steps and their human labels (order_by() drops Step's join-inducing default order).
        locked = Step.objects.filter(episode=episode, index__in=wanted).order_by("pk")
        if bases:  # concurrent edits of these steps wait here, so each compares with what the other wrote
            list(locked.select_for_update().values_list("pk", flat=True))
        rows = (
            Step.objects.filter(episode=episode, index__in=wanted)
            .order_by()
            .annotate(human=FilteredRelation("labels", condition=Q(labels__source=LabelSource.HUMAN)))
            .values_list("index", "pk", "human__value", "human__author__username", "human__agent__name")
        )
        steps, old, who = {}, {}, {}
        for index, pk, value, author, agent in rows:
            steps[index] = pk
            if value is not None:
                old[index] = value
                who[index] = _who(author, agent)
        missing = sorted(set(wanted) - set(steps))
        if missing:
            raise LabelError(f"episode has no step {missing[0]} (it has {episode.num_steps} steps)")
        conflicts = [
            Conflict(i, i, base, old.get(i), who.get(i, ""))
            for i, base in sorted((bases or {}).items())
            if i in wanted and old.get(i) != base and old.get(i) != wanted[i]
        ]
        if conflicts:
            raise LabelConflict(conflicts)
        edits = [FrameEdit(i, old.get(i), v) for i, v in sorted(wanted.items()) if old.get(i) != v]
        _frame_labels_write(episode=episode, edits=edits, steps=steps, actor=actor)
        frame_history_append(episode=episode, edits=edits, actor=actor, action=action)
    return edits


def _frame_labels_write(*, episode: Episode, edits: list[FrameEdit], steps: dict[int, int], actor: Actor) -> None:
    now = timezone.now()
    rows = [
        FrameLabel(
            project_id=episode.project_id,
            episode=episode,
            step_id=steps[e.index],
            value=e.new,
            source=LabelSource.HUMAN,
            updated_at=now,
            **actor.fields(),
        )
        for e in edits
        if e.new is not None
    ]
    if rows:
        FrameLabel.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["step", "source"],
            update_fields=["value", "author", "agent", "updated_at"],
        )
    cleared = [steps[e.index] for e in edits if e.new is None]
    if cleared:
        FrameLabel.objects.filter(step_id__in=cleared, source=LabelSource.HUMAN).delete()


def frame_history_append(
    *,
    episode: Episode,
    edits: Iterable[FrameEdit],
    actor: Actor,
    action: str | None,
    source: str = LabelSource.HUMAN,
) -> None:
    """History rows, one per run of consecutive indices sharing the old and new value."""
    rows: list[LabelChange] = []
    for edit in edits:
        act = action or (LabelChange.Action.CLEAR if edit.new is None else LabelChange.Action.SET)
        last = rows[-1] if rows else None
        if (
            last is not None
            and last.end + 1 == edit.index
            and last.old_value == (edit.old or "")
            and last.new_value == (edit.new or "")
            and last.action == act
        ):
            last.end = edit.index
            continue
        rows.append(
            LabelChange(
                project_id=episode.project_id,
                episode=episode,
                kind=LabelChange.Kind.FRAME,
                action=act,
                source=source,
                start=edit.index,
                end=edit.index,
                old_value=edit.old or "",
                new_value=edit.new or "",
                **actor.fields(),
            )
        )
    LabelChange.objects.bulk_create(rows)


@dataclass(frozen=True)
class WindowEdit:
    start: int
    end: int
    old: str | None
    new: str | None


def window_labels_set(
    *,
    episode: Episode,
    items: Sequence[tuple[int, int, str | None]],
    actor: Actor,
    action: str | None = None,
    bases: dict[tuple[int, int], str | None] | None = None,
) -> list[WindowEdit]:
    """Set (or delete, value None) the human window label of each (start, end, value) span. `bases` maps
    spans to the value the edit was based on; LabelConflict when any of them changed meanwhile."""
    wanted: dict[tuple[int, int], str | None] = {}
    for start, end, value in items:
        if value is not None and value not in WINDOW_VALUES:
            raise LabelError(f"window label must be positive, negative, unclear or null, got {value!r}")
        if start < 0 or end < start:
            raise LabelError(f"window {start}..{end}: end must not be before start")
        wanted[(int(start), int(end))] = value
    if not wanted:
        return []
    with transaction.atomic():
        steps = Step.objects.filter(episode=episode).order_by().values_list("index", flat=True)
        known = set(steps.filter(index__in={i for span in wanted for i in span}))
        for start, end in wanted:
            if start not in known or end not in known:
                raise LabelError(f"window {start}..{end} is outside the episode (it has {episode.num_steps} steps)")
        if bases:  # serialise concurrent window edits of this episode
            Episode.objects.select_for_update().filter(pk=episode.pk).values_list("pk", flat=True).first()
        existing, who = {}, {}
        for s, e, v, author in (
            WindowLabel.objects.filter(episode=episode, source=LabelSource.HUMAN)
            .filter(start__in={s for s, _ in wanted})
            .order_by()
            .values_list("start", "end", "value", "author__username")
        ):
            existing[(s, e)], who[(s, e)] = v, author or ""
        conflicts = [
            Conflict(span[0], span[1], base, existing.get(span), who.get(span, ""))
            for span, base in sorted((bases or {}).items())
            if span in wanted and existing.get(span) != base and existing.get(span) != wanted[span]
        ]
        if conflicts:
            raise LabelConflict(conflicts)
        edits = [WindowEdit(s, e, existing.get((s, e)), v) for (s, e), v in wanted.items() if existing.get((s, e)) != v]
        _window_labels_write(episode=episode, edits=edits, actor=actor)
        window_history_append(episode=episode, edits=edits, actor=actor, action=action)
    return edits


def _window_labels_write(*, episode: Episode, edits: list[WindowEdit], actor: Actor) -> None:
    now = timezone.now()
    rows = [
        WindowLabel(
            project_id=episode.project_id,
            episode=episode,
            start=e.start,
            end=e.end,
            value=e.new,
            source=LabelSource.HUMAN,
            author=actor.user,
            updated_at=now,
        )
        for e in edits
        if e.new is not None
    ]
    if rows:
        WindowLabel.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["episode", "start", "end", "source"],
            update_fields=["value", "author", "updated_at"],
        )
    for e in edits:
        if e.new is None:
            WindowLabel.objects.filter(episode=episode, start=e.start, end=e.end, source=LabelSource.HUMAN).delete()


def window_history_append(
    *,
    episode: Episode,
    edits: Iterable[WindowEdit],
    actor: Actor,
    action: str | None,
    source: str = LabelSource.HUMAN,
) -> None:
    LabelChange.objects.bulk_create(
        LabelChange(
            project_id=episode.project_id,
            episode=episode,
            kind=LabelChange.Kind.WINDOW,
            action=action or (LabelChange.Action.CLEAR if e.new is None else LabelChange.Action.SET),
            source=source,
            start=e.start,
            end=e.end,
            old_value=e.old or "",
            new_value=e.new or "",
            **actor.fields(),
        )
        for e in edits
    )
