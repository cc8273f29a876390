"""Writes for the labeling app: agents, episodes and the atomic, idempotent step ingest."""

from __future__ import annotations

import uuid as uuid_lib
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from common.images.checks import CheckedImage
from projects.models import Agent, Project

from ..bulk_rows import insert_returning_ids, insert_rows
from ..frame_files import frames_delete, frames_write
from ..models import Episode, Frame, Step


class IngestError(ValueError):
    """Input that cannot be stored; the message names what is wrong."""


class IngestConflict(IngestError):
    """The request contradicts what is already stored (for example a UUID used by another project)."""


@dataclass
class StepInput:
    index: int
    action: list[float] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    success: bool = False
    score: float | None = None
    info: dict = field(default_factory=dict)
    images: dict[str, CheckedImage] = field(default_factory=dict)

    @classmethod
    def of(cls, step: Any, images: dict[str, CheckedImage] | None = None) -> StepInput:
        """A step's values from a parsed step of any source (a chunk's step, an RLinf episode's step), with
        `images`."""
        return cls(
            index=step.index,
            action=step.action,
            reward=step.reward,
            terminated=step.terminated,
            truncated=step.truncated,
            success=step.success,
            score=step.score,
            info=step.info,
            images=images or {},
        )


@dataclass(frozen=True)
class AppendResult:
    created: int
    skipped: int
    num_steps: int


def episode_create(
    *,
    project: Project,
    uuid: uuid_lib.UUID,
    source: str = Episode.Source.SIM,
    agent: Agent | None = None,
    env_id: str = "",
    metadata: dict | None = None,
) -> tuple[Episode, bool]:
    """The episode with this client-supplied UUID, created if new. Retrying returns the same row.

    A new UUID is one INSERT; a taken one (a retry, or a concurrent one that won) fails it and is read."""
    values = {"project": project, "source": source, "agent": agent, "env_id": env_id, "metadata": metadata or {}}
    try:
        with transaction.atomic():
            _ingest_commit_mode()
            episode, created = Episode.objects.create(uuid=uuid, **values), True
    except IntegrityError:
        episode, created = Episode.objects.select_related("project", "agent").get(uuid=uuid), False
    if episode.project_id != project.pk:
        raise IngestConflict(f"episode {uuid} already belongs to another project")
    return episode, created


def _locked_episode(episode: Episode | uuid_lib.UUID, check: Callable[[Episode], None] | None) -> Episode:
    """Inside a transaction: the episode (or the one with this UUID) locked against concurrent chunks, with its
    project, in one query; `check` (access rules) runs on it before anything is written."""
    lookup = {"uuid": episode} if isinstance(episode, uuid_lib.UUID) else {"pk": episode.pk}
    locked = Episode.objects.select_related("project").select_for_update(of=("self",)).get(**lookup)
    if check is not None:
        check(locked)
    return locked


def steps_append(
    *, episode: Episode | uuid_lib.UUID, steps: list[StepInput], check: Callable[[Episode], None] | None = None
) -> AppendResult:
    """Store a chunk of steps with their frames, all or nothing.

    Steps whose index is already stored are skipped (a retried chunk changes nothing). Chunks of one
    episode are serialised by a row lock, so concurrent retries never duplicate. Frame files written
    before a failure are removed again. `episode` may be a UUID (Episode.DoesNotExist when there is none);
    `check(episode)` runs on the locked row first (the API's access rules: it raises to refuse).
    """
    indices = [step.index for step in steps]
    if len(set(indices)) != len(indices):
        raise IngestError("a chunk lists the same step index twice")
    written: list[str] = []
    try:
        with transaction.atomic():
            _ingest_commit_mode()
            locked = _locked_episode(episode, check)
            _check_cameras(steps, set(locked.project.camera_views))
            existing = set(
                Step.objects.filter(episode_id=locked.pk, index__in=indices).order_by().values_list("index", flat=True)
            )
            if locked.status == Episode.Status.FINISHED:
                if len(existing) == len(indices):
                    return AppendResult(0, len(indices), locked.num_steps)
                raise IngestConflict("episode is finished; it takes no new steps")
            new_steps = [s for s in steps if s.index not in existing]
            if not new_steps:
                return AppendResult(0, len(existing), locked.num_steps)
            folder = f"frames/{locked.project_id}/{locked.uuid}"
            files = [
                (f"{folder}/{step.index:06d}_{camera}{image.extension}", image.data)
                for step in new_steps
                for camera, image in step.images.items()
            ]
            # on the calling thread: files written from other threads at once cost more than they save (each
            # system call hands the GIL over, a futex wake-up and sleep per call; see labeling.frame_files)
            names = written = frames_write(default_storage, files)
            try:
                step_ids = insert_returning_ids(Step, [_step_row(locked, s) for s in new_steps])
            except ValueError as exc:  # json.dumps refuses NaN and infinity, which JSON cannot carry
                raise IngestError(f"a step's action or info holds a number JSON cannot carry ({exc})") from None
            stored_names = iter(names)  # in the order of `files`: step by step, camera by camera
            frame_rows = [
                {
                    "step_id": step_id,
                    "camera": camera,
                    "image": next(stored_names),
                    "width": image.width,
                    "height": image.height,
                }
                for step_id, step in zip(step_ids, new_steps, strict=True)
                for camera, image in step.images.items()
            ]
            insert_rows(Frame, frame_rows)
            locked.num_steps += len(new_steps)
            locked.save(update_fields=["num_steps"])
            return AppendResult(len(new_steps), len(existing), locked.num_steps)
    except BaseException:
        frames_delete(default_storage, written)
        raise


def _check_cameras(steps: list[StepInput], cameras: set[str]) -> None:
    for step in steps:
        unknown = set(step.images) - cameras
        if unknown:
            raise IngestError(
                f"steps[{step.index}].images: unknown camera {sorted(unknown)[0]!r}; "
                f"project cameras are {sorted(cameras)}"
            )


_async_commit_sessions: weakref.WeakSet = weakref.WeakSet()


def _commits_async() -> bool:
    return connection.vendor == "postgresql" and not settings.INGEST_SYNCHRONOUS_COMMIT


def ingest_session_commit_mode() -> None:
    """For a database connection that runs nothing but ingest writes (the fast path's writer threads): the
    commit mode of `_ingest_commit_mode` for the whole session, set once per connection, so that no ingest
    transaction on it pays a round trip for it. A new connection (after a dropped one) is set again."""
    if not _commits_async():
        return
    connection.ensure_connection()
    if connection.connection in _async_commit_sessions:
        return
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit TO OFF")
    _async_commit_sessions.add(connection.connection)


def _ingest_commit_mode() -> None:
    """Inside an ingest transaction on PostgreSQL: unless INGEST_SYNCHRONOUS_COMMIT, commit without waiting
    for the WAL flush (`synchronous_commit = off` for this transaction only, unless the whole session has it:
    `ingest_session_commit_mode`). The transaction stays atomic; a database crash may lose the last fraction
    of a second of commits, no more durable than the frame files themselves, which are not fsynced either.
    A commit then costs no disk flush (tens of ms here)."""
    if _commits_async() and connection.connection not in _async_commit_sessions:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


def _step_row(episode: Episode, step: StepInput) -> dict:
    return {
        "episode_id": episode.pk,
        "index": step.index,
        "action": list(step.action),
        "reward": float(step.reward),
        "terminated": bool(step.terminated),
        "truncated": bool(step.truncated),
        "env_success": bool(step.success),
        "score": step.score,
        "info": step.info,
    }


def episode_finish(
    *,
    episode: Episode | uuid_lib.UUID,
    success: bool | None = None,
    metadata: dict | None = None,
    check: Callable[[Episode], None] | None = None,
) -> Episode:
    """Mark the episode complete (idempotent) and queue its proposals.

    Success defaults to whether any step reported success. `episode` and `check` as for `steps_append`.
    """
    with transaction.atomic():
        _ingest_commit_mode()
        episode = _locked_episode(episode, check)
        if success is None:
            success = Step.objects.filter(episode_id=episode.pk, env_success=True).exists()
        episode.success = success
        if metadata:
            episode.metadata = {**episode.metadata, **metadata}
        if episode.status != Episode.Status.FINISHED:
            episode.status = Episode.Status.FINISHED
            episode.finished_at = timezone.now()
        episode.save(update_fields=["success", "metadata", "status", "finished_at"])
    transaction.on_commit(lambda: _queue_proposals(episode.pk))
    return episode


def _queue_proposals(episode_id: int) -> None:
    from ..tasks import generate_episode_proposals

    generate_episode_proposals.delay(episode_id)
