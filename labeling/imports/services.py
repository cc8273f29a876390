"""Store imported files as episodes, through the same services the ingest API uses.

Mapping onto our model:
- RLinf episode pickle -> one Episode (source=import, success = the pickle's `success`) with N+1
  steps; step i holds observation i, rewards[i], terminated[i], truncated[i], infos[i] and the
  action that led to it, actions[i-1] (step 0, the reset, has action []). `score` = gae[i] when the
  pickle has `gae`. Per-step env success by RLinf's rule. Cameras: main_images -> "main";
  third_view_images, then extra_view_images[k] -> "extra", "extra_1", ...; wrist_images -> "wrist", ...
  (rlinf_episode.py); cameras the project lacks are dropped (listed in the episode's metadata). No
  labels: proposals are the labeler's job.
- `success/` + `failure/` image folder -> one Episode per label folder (success=True for
  `success/`, False for `failure/`), one step per image in natural file-name order, each with a
  human FrameLabel (success / fail). The image file name is kept in the step's info.
- RLinf `train.pt`/`val.pt` payload -> one Episode per file (success unknown), one step per image
  in payload order, each with a human FrameLabel (label 1 -> success, 0 -> fail); the payload's
  metadata goes into the episode's metadata.
Folder and payload frames go to the project's "main" camera (its first camera when it has no
"main"). Imported human labels have author=None and params={"imported_from": <file>}.

Each episode is stored atomically (database rows, and frame files removed again on failure), under
a UUID derived from the project and the file's content hash, so importing the same file twice
changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from common.images.checks import CheckedImage, ImageError, check_image, decode_rgb, encode_array
from projects.models import Project

from ..ingest.services import IngestError, StepInput
from ..models import FrameLabel
from ..table_stats import EPISODE_TABLES, refresh_after_bulk_write
from .lerobot.importer import import_lerobot, import_videos
from .pickle_errors import PickleLoadError
from .rlinf_episode import EpisodeFormatError, parse_episode, to_json
from .sources import (
    ImportSummary,
    Source,
    SourceError,
    discover,
    extract_zip,
    file_kind,
    file_sha256,
    folder_images,
    folder_sha256,
    load_payload,
)
from .storing import already_imported, count, encode, import_uuid, store_episode
from .video_frames import VideoError

if TYPE_CHECKING:
    from .safe_pickle import PickleLimits

logger = logging.getLogger(__name__)

EXPECTED_ERRORS = (SourceError, PickleLoadError, EpisodeFormatError, ImageError, IngestError, VideoError)


def import_paths(
    *,
    project: Project,
    paths: Iterable[Path],
    env_id: str = "",
    on_sources: Callable[[int], None] | None = None,
    on_progress: Callable[[Source], None] | None = None,
) -> ImportSummary:
    """Import every importable file under `paths` (zips are unpacked first).

    Raises SourceError for a path that does not exist or has an unknown type, or when nothing under
    the paths is importable; problems inside a file are recorded in the summary and the other files
    still import.
    """
    summary = ImportSummary()
    with contextlib.ExitStack() as stack:
        roots: list[Path] = []
        for path in paths:
            if path.is_file() and file_kind(path) == "zip":
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rs-import-")))
                extract_zip(path, folder / path.stem)
                roots.append(folder / path.stem)
            else:
                roots.append(path)
        sources, ignored = discover(roots)
        if not sources:
            passed_over = f" (passed over: {', '.join(name for name, _ in ignored[:3])})" if ignored else ""
            raise SourceError(
                "nothing to import: no .pkl, .pt or .mp4 files, LeRobot datasets or folders with success/ or failure/"
                + passed_over
            )
        summary.ignored.extend(ignored)
        if on_sources:
            on_sources(len(sources))
        for source in sources:
            import_source(project=project, source=source, env_id=env_id, summary=summary)
            if on_progress:
                on_progress(source)
    rows = summary.episodes + summary.steps + summary.frames + summary.labels
    refresh_after_bulk_write(EPISODE_TABLES, rows=rows)
    return summary


def import_source(*, project: Project, source: Source, env_id: str, summary: ImportSummary) -> None:
    importer = {
        "pickle": _import_pickle,
        "payload": _import_payload,
        "folder": _import_folder,
        "lerobot": import_lerobot,
        "video": import_videos,
    }[source.kind]
    try:
        importer(project=project, source=source, env_id=env_id, summary=summary)
    except EXPECTED_ERRORS as exc:
        summary.failed.append((source.name, str(exc)))
    except Exception as exc:  # never let one odd file abort the others, or a page 500
        logger.exception("import of %s failed", source.path)
        summary.failed.append((source.name, f"unexpected error: {exc.__class__.__name__}: {exc}"))


def pickle_limits() -> PickleLimits:
    from .safe_pickle import PickleLimits  # torch: loaded by the import job, not by the web process's pages

    return PickleLimits(
        max_array_bytes=settings.PICKLE_MAX_ARRAY_BYTES,
        max_total_bytes=settings.PICKLE_MAX_TOTAL_BYTES,
        max_nodes=settings.PICKLE_MAX_VALUES,
    )


def _import_pickle(*, project: Project, source: Source, env_id: str, summary: ImportSummary) -> None:
    digest = file_sha256(source.path)
    uuid = import_uuid(project=project, kind="rlinf_pickle", digest=digest)
    if already_imported(uuid, source, summary):
        return
    from .safe_pickle import load_path

    parsed = parse_episode(load_path(source.path, pickle_limits()), file_name=source.path.name)
    cameras = set(project.camera_views)
    steps = []
    for step in parsed.steps:
        images = {}
        for camera, array in step.images.items():
            if camera in cameras:
                images[camera] = encode(array, f"step {step.index} camera {camera}")
        steps.append(StepInput.of(step, images))
    metadata = {
        "format": "rlinf_pickle",
        "file_name": source.path.name,
        "sha256": digest,
        "rank": parsed.rank,
        "env_idx": parsed.env_idx,
        "episode_id": parsed.episode_id,
        "step": parsed.global_step,
        "task_description": parsed.task_description,
        "score_source": parsed.score_source,
        "action_convention": "step i holds actions[i-1], the action that led to observation i; step 0 has none",
        "cameras_dropped": [camera for camera in parsed.cameras() if camera not in cameras],
    }
    stored = store_episode(
        project=project,
        uuid=uuid,
        env_id=parsed.env_id or env_id,
        metadata=metadata,
        steps=steps,
        success=parsed.success,
    )
    count(summary, stored)


def _import_payload(*, project: Project, source: Source, env_id: str, summary: ImportSummary) -> None:
    digest = file_sha256(source.path)
    uuid = import_uuid(project=project, kind="rlinf_payload", digest=digest)
    if already_imported(uuid, source, summary):
        return
    payload = load_payload(source.path)
    camera = _label_camera(project)
    steps = []
    labels = {}
    for index, (array, label) in enumerate(zip(payload.images, payload.labels, strict=True)):
        steps.append(StepInput(index=index, images={camera: encode(array, f"images[{index}]")}))
        labels[index] = FrameLabel.Value.SUCCESS if label == 1 else FrameLabel.Value.FAIL
    metadata = {
        "format": "rlinf_reward_payload",
        "file_name": source.path.name,
        "sha256": digest,
        "payload_metadata": to_json(payload.metadata),
    }
    stored = store_episode(
        project=project,
        uuid=uuid,
        env_id=env_id,
        metadata=metadata,
        steps=steps,
        success=None,
        labels=labels,
        imported_from=source.path.name,
    )
    count(summary, stored)


def _import_folder(*, project: Project, source: Source, env_id: str, summary: ImportSummary) -> None:
    images, ignored = folder_images(source.path)
    summary.ignored.extend(ignored)
    camera = _label_camera(project)
    for value in (FrameLabel.Value.SUCCESS, FrameLabel.Value.FAIL):
        files = [path for label, path in images if label == value]
        if not files:
            continue
        folder_name = "success" if value == FrameLabel.Value.SUCCESS else "failure"
        name = f"{source.name}/{folder_name}"
        digest = folder_sha256([(value, path) for path in files])
        uuid = import_uuid(project=project, kind="image_folder", digest=digest)
        if already_imported(uuid, Source("folder", source.path / folder_name, name), summary):
            continue
        steps: list[StepInput] = []
        for path in files:
            try:
                image = _folder_image(path.read_bytes())
            except ImageError as exc:
                summary.failed.append((f"{name}/{path.name}", str(exc)))
                continue
            steps.append(StepInput(index=len(steps), info={"file_name": path.name}, images={camera: image}))
        if not steps:
            continue
        metadata = {"format": "image_folder", "folder": name, "label": value, "sha256": digest}
        stored = store_episode(
            project=project,
            uuid=uuid,
            env_id=env_id,
            metadata=metadata,
            steps=steps,
            success=value == FrameLabel.Value.SUCCESS,
            labels=dict.fromkeys(range(len(steps)), value),
            imported_from=name,
        )
        count(summary, stored)


def _label_camera(project: Project) -> str:
    cameras = list(project.camera_views or [])
    if not cameras:
        raise SourceError(f"project {project.name!r} has no cameras to put imported frames on")
    return "main" if "main" in cameras else cameras[0]


def _folder_image(raw: bytes) -> CheckedImage:
    """PNG/JPEG bytes kept as they are; other modes (RGBA, grayscale) converted to RGB PNG."""
    limits = {"max_side": settings.MAX_IMAGE_SIDE, "max_pixels": settings.MAX_IMAGE_PIXELS}
    try:
        return check_image(raw, max_side=limits["max_side"], max_pixels=limits["max_pixels"])
    except ImageError as exc:
        if "must be RGB" not in str(exc):
            raise
    return encode_array(decode_rgb(raw), **limits)  # size and format were checked above
