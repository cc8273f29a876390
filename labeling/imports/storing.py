"""Storing one imported episode, shared by every importer (services.py and lerobot/importer.py): its UUID from
the file's content, whether it is already there, its images encoded under the limits, and its rows, frames and
human labels stored all or nothing. It imports no importer, so each importer builds on it without a cycle."""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction

from common.images.checks import CheckedImage, ImageError, encode_array
from projects.models import Project

from ..ingest.services import StepInput, episode_create, episode_finish, steps_append
from ..models import Episode, Frame, FrameLabel, LabelChange, LabelSource, Step
from .sources import ImportSummary, Source

IMPORT_NAMESPACE = uuid_lib.UUID("7d0c5f1e-3b8a-4f39-9a52-4c1e2d6b8a10")
CHUNK_STEPS = 32


@dataclass(frozen=True)
class StoredEpisode:
    """What one stored episode added: its row and its counts of steps, frames and human labels."""

    episode: Episode
    steps: int
    frames: int
    labels: int


def import_uuid(*, project: Project, kind: str, digest: str) -> uuid_lib.UUID:
    """The same file imported into the same project always maps to the same episode UUID."""
    return uuid_lib.uuid5(IMPORT_NAMESPACE, f"{project.pk}:{kind}:{digest}")


def store_episode(
    *,
    project: Project,
    uuid: uuid_lib.UUID,
    env_id: str,
    metadata: dict,
    steps: list[StepInput],
    success: bool | None,
    labels: Mapping[int, str] | None = None,
    imported_from: str = "",
) -> StoredEpisode:
    """One episode, its steps, frames and human labels: all stored, or nothing (files included)."""
    written: list[str] = []
    try:
        with transaction.atomic():
            episode, _ = episode_create(
                project=project, uuid=uuid, source=Episode.Source.IMPORT, env_id=env_id[:100], metadata=metadata
            )
            for start in range(0, len(steps), CHUNK_STEPS):
                steps_append(episode=episode, steps=steps[start : start + CHUNK_STEPS])
                written = list(Frame.objects.filter(step__episode=episode).values_list("image", flat=True))
            num_labels = _human_labels_create(episode=episode, labels=labels or {}, imported_from=imported_from)
            episode = episode_finish(episode=episode, success=success)
            if success is None:
                Episode.objects.filter(pk=episode.pk).update(success=None)
                episode.success = None
    except BaseException:
        for name in written:
            default_storage.delete(name)
        raise
    return StoredEpisode(episode, len(steps), len(written), num_labels)


def _human_labels_create(*, episode: Episode, labels: Mapping[int, str], imported_from: str) -> int:
    if not labels:
        return 0
    step_ids = dict(Step.objects.filter(episode=episode, index__in=list(labels)).values_list("index", "id"))
    FrameLabel.objects.bulk_create(
        [
            FrameLabel(
                project_id=episode.project_id,
                episode=episode,
                step_id=step_ids[index],
                value=value,
                source=LabelSource.HUMAN,
                author=None,
                params={"imported_from": imported_from},
            )
            for index, value in labels.items()
        ]
    )
    history: list[LabelChange] = []  # one row per run of consecutive steps with the same value
    for index, value in sorted(labels.items()):
        last = history[-1] if history else None
        if last is not None and last.end + 1 == index and last.new_value == value:
            last.end = index
            continue
        history.append(
            LabelChange(
                project_id=episode.project_id,
                episode=episode,
                kind=LabelChange.Kind.FRAME,
                action=LabelChange.Action.SET,
                source=LabelSource.HUMAN,
                start=index,
                end=index,
                new_value=value,
            )
        )
    LabelChange.objects.bulk_create(history)
    return len(labels)


def already_imported(uuid: uuid_lib.UUID, source: Source, summary: ImportSummary) -> bool:
    """Whether a finished episode already has this UUID (then listed in the summary): importing the same
    file again changes nothing."""
    episode = Episode.objects.filter(uuid=uuid, status=Episode.Status.FINISHED).first()
    if episode is None:
        return False
    summary.already_imported.append((source.name, f"already imported as episode {episode.uuid}"))
    return True


def count(summary: ImportSummary, stored: StoredEpisode) -> None:
    """Add a stored episode's rows to the summary the import page and command report."""
    summary.episodes += 1
    summary.steps += stored.steps
    summary.frames += stored.frames
    summary.labels += stored.labels


def encode(array, where: str) -> CheckedImage:
    """An image array as a checked PNG under the size limits; an error names `where` (step, camera, file)."""
    try:
        return encode_array(array, max_side=settings.MAX_IMAGE_SIDE, max_pixels=settings.MAX_IMAGE_PIXELS)
    except ImageError as exc:
        raise ImageError(f"{where}: {exc}") from None
