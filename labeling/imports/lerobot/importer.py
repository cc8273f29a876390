"""Import LeRobot datasets and mp4 episodes into a project (import job kinds `lerobot` and `video`).

- A LeRobot dataset folder (v2.x or v3.0, see labeling/imports/lerobot/format.py) -> one Episode per dataset episode, one step
  per frame. Camera keys `observation.images.<cam>` go to the project's camera `<cam>`, the others in order to
  its remaining cameras (lerobot_format.map_cameras; the mapping and dropped keys are kept in the episode's
  metadata). Per step: `action`, `next.reward` -> reward, `next.done` -> terminated, `next.success` -> the
  step's env success; `frame_index`, `timestamp` and `observation.state` go to the step's info. The episode's
  success is whether any frame has `next.success`; without that column it is unknown. A dataset without a
  `label` column makes no labels (its success flags are the env's).
- Our own export (labeling/imports/lerobot/export.py) comes back as it left: its `label` column (1 success, 0 fail,
  -1 none) -> human frame labels (params `imported_from` names the dataset and episode), and its `env.reward`
  and `env.success` -> the step's reward and env success and the episode's success (there `next.success` and
  `next.reward` are the label as a flag and a reward, so they do not stand for the env's).
  RLinf's own recordings (CollectEpisode, see format.py) name the columns otherwise: `actions` -> action,
  `done` -> terminated, `state`, `intervene_flag`, `segment_id` and `is_success` -> the step's info. RLinf's
  `is_success` is the episode's outcome written on every frame, so it is the episode's success, not a step's
  env success (which would make every frame of a successful episode a success frame for the proposals).
- mp4 files -> one Episode per group: `NAME.mp4` is one episode on the project's first camera; `NAME.<cam>.mp4`
  files with the same NAME are one episode, each on camera `<cam>` (a camera the project lacks is refused).
  One step per frame; a camera with fewer frames leaves the later steps without its image.

Frames are decoded with PyAV under VIDEO_MAX_FRAMES, MAX_IMAGE_SIDE and MAX_IMAGE_PIXELS (checked from the
stream header before decoding) and stored as PNG. Episode UUIDs derive from the project and a hash of the
dataset's metadata (with the episode index) or of the video files, so importing again changes nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from django.conf import settings

from common.images.checks import CheckedImage, ImageError, check_image
from projects.models import Project

from ...ingest.services import StepInput
from ...models import FrameLabel
from ..sources import ImportSummary, Source, SourceError, file_sha256
from ..storing import already_imported, count, encode, import_uuid, store_episode
from ..video_frames import VideoError, VideoLimits, decode_frames, video_camera
from .format import EpisodeRef, LeRobotDataset, camera_name, episode_rows, map_cameras, read_dataset

SUCCESS_COLUMNS = ("env.success", "next.success", "is_success")
LABEL_VALUES = {1: FrameLabel.Value.SUCCESS, 0: FrameLabel.Value.FAIL}  # export.LABEL_CODES read back; -1: none


def video_limits() -> VideoLimits:
    return VideoLimits(
        max_frames=settings.VIDEO_MAX_FRAMES, max_side=settings.MAX_IMAGE_SIDE, max_pixels=settings.MAX_IMAGE_PIXELS
    )


def import_lerobot(*, project: Project, source: Source, env_id: str, summary: ImportSummary) -> None:
    """Every episode of the dataset at `source.path`; an episode that fails is listed and the others import."""
    dataset = read_dataset(source.path, max_episodes=settings.LEROBOT_MAX_EPISODES)
    mapping = map_cameras(dataset.camera_keys, list(project.camera_views or []))
    digest = _dataset_digest(dataset)
    for ref in dataset.episodes:
        name = f"{source.name} episode {ref.index}"
        uuid = import_uuid(project=project, kind="lerobot", digest=f"{digest}:{ref.index}")
        if already_imported(uuid, Source("lerobot", source.path, name), summary):
            continue
        try:
            rows = episode_rows(dataset, ref)
            steps = _episode_steps(dataset, ref, rows, mapping)
            labels = _row_labels(ref, rows) if "label" in dataset.features else {}
        except (SourceError, VideoError, ImageError) as exc:
            summary.failed.append((name, str(exc)))
            continue
        metadata = {
            "format": f"lerobot_{dataset.version}",
            "dataset": source.name,
            "episode_index": ref.index,
            "task_description": ref.task,
            "fps": dataset.fps,
            "cameras": mapping,
            "cameras_dropped": [key for key in dataset.camera_keys if key not in mapping],
            "success_column": next((c for c in SUCCESS_COLUMNS if c in dataset.features), None),
            "sha256": digest,
        }
        success = _episode_success(dataset, steps)
        count(
            summary,
            store_episode(
                project=project,
                steps=steps,
                metadata=metadata,
                uuid=uuid,
                env_id=env_id,
                success=success,
                labels=labels,
                imported_from=name,
            ),
        )


def import_videos(*, project: Project, source: Source, env_id: str, summary: ImportSummary) -> None:
    """One episode from the group of video files `source.parts` (see video_frames.video_groups)."""
    cameras = list(project.camera_views or [])
    if not cameras:
        raise SourceError(f"project {project.name!r} has no cameras to put video frames on")
    by_camera: dict[str, Path] = {}
    for path in source.parts:
        camera = video_camera(path)
        if camera is None:
            camera = cameras[0]
        elif camera not in cameras:
            raise SourceError(f"{path.name}: the project has no camera {camera!r} (it has {', '.join(cameras)})")
        if camera in by_camera:
            raise SourceError(f"{path.name} and {by_camera[camera].name} are both camera {camera!r}")
        by_camera[camera] = path
    digest = hashlib.sha256(
        "".join(f"{camera}:{file_sha256(path)}\n" for camera, path in sorted(by_camera.items())).encode()
    ).hexdigest()
    uuid = import_uuid(project=project, kind="video", digest=digest)
    if already_imported(uuid, source, summary):
        return
    frames = {
        camera: [encode(a, f"{path.name} frame {i}") for i, a in enumerate(decode_frames(path, video_limits()))]
        for camera, path in by_camera.items()
    }
    length = max(len(f) for f in frames.values())
    if length == 0:
        raise SourceError(f"{source.name}: the video holds no frames")
    steps = [
        StepInput(index=index, images={camera: pngs[index] for camera, pngs in frames.items() if index < len(pngs)})
        for index in range(length)
    ]
    metadata = {
        "format": "video",
        "files": {camera: path.name for camera, path in by_camera.items()},
        "frames": {camera: len(f) for camera, f in frames.items()},
        "sha256": digest,
    }
    count(
        summary,
        store_episode(project=project, uuid=uuid, env_id=env_id, metadata=metadata, steps=steps, success=None),
    )


def _episode_steps(
    dataset: LeRobotDataset, ref: EpisodeRef, rows: list[dict[str, Any]], mapping: dict[str, str]
) -> list[StepInput]:
    if len(rows) > settings.VIDEO_MAX_FRAMES:
        raise SourceError(f"{len(rows)} frames; the limit is {settings.VIDEO_MAX_FRAMES} (VIDEO_MAX_FRAMES)")
    images: dict[str, list[CheckedImage]] = {}
    for key, camera in mapping.items():
        span = ref.videos.get(key)
        if span is not None:
            arrays = decode_frames(span.path, video_limits(), start_s=span.start_s, end_s=span.end_s)
            images[camera] = [encode(a, f"{camera_name(key)} frame {i}") for i, a in enumerate(arrays)]
        else:
            images[camera] = [_row_image(row.get(key), f"{key} frame {i}") for i, row in enumerate(rows)]
        if len(images[camera]) < len(rows):
            raise SourceError(
                f"episode {ref.index}: {key} has {len(images[camera])} frames for {len(rows)} rows of data"
            )
    return [
        StepInput(
            index=index,
            action=_floats(_either(row, "action", "actions")),
            reward=float(_scalar(_either(row, "env.reward", "next.reward"), 0.0)),
            terminated=bool(_scalar(_either(row, "next.done", "done"), False)),
            success=bool(_scalar(_either(row, "env.success", "next.success"), False)),
            info=_info(row),
            images={camera: frames[index] for camera, frames in images.items()},
        )
        for index, row in enumerate(rows)
    ]


def _row_labels(ref: EpisodeRef, rows: list[dict[str, Any]]) -> dict[int, str]:
    """Our export's `label` column as {step index: value}; -1 (or empty) is an unlabeled frame."""
    labels: dict[int, str] = {}
    for index, row in enumerate(rows):
        code = _scalar(row.get("label"), -1)
        if isinstance(code, bool) or not isinstance(code, int) or code not in (-1, *LABEL_VALUES):
            raise SourceError(f"episode {ref.index} frame {index}: `label` is {code!r}; expected 1, 0 or -1")
        if code in LABEL_VALUES:
            labels[index] = LABEL_VALUES[code]
    return labels


def _episode_success(dataset: LeRobotDataset, steps: list[StepInput]) -> bool | None:
    """Any frame's env success (`env.success` in our export, else `next.success`), else RLinf's `is_success`
    (the same on every frame), else unknown."""
    if "env.success" in dataset.features or "next.success" in dataset.features:
        return any(step.success for step in steps)
    if "is_success" in dataset.features:
        return any(step.info.get("is_success") for step in steps)
    return None


def _either(row: dict[str, Any], name: str, rlinf_name: str) -> Any:
    value = row.get(name)
    return row.get(rlinf_name) if value is None else value


def _row_image(value: Any, where: str) -> CheckedImage:
    """An `image` feature's cell: {"bytes": PNG/JPEG, "path": ...} as the datasets library stores it."""
    raw = value.get("bytes") if isinstance(value, dict) else None
    if not raw:
        raise SourceError(f"{where}: no image bytes in the parquet row")
    try:
        return check_image(raw, max_side=settings.MAX_IMAGE_SIDE, max_pixels=settings.MAX_IMAGE_PIXELS)
    except ImageError as exc:
        raise ImageError(f"{where}: {exc}") from None


def _scalar(value: Any, default: Any) -> Any:
    """LeRobot writes shape-(1,) features as scalars or one-element lists."""
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    return default if value is None else value


def _floats(value: Any) -> list[float]:
    if value is None:
        return []
    values = value if isinstance(value, list | tuple) else [value]
    return [float(v) for v in values]


def _info(row: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = {key: row[key] for key in ("frame_index", "timestamp") if key in row}
    for key in ("observation.state", "state"):
        if row.get(key) is not None:
            info[key] = _floats(row[key])
    for key, kind in (("is_success", bool), ("intervene_flag", bool), ("segment_id", int)):
        if row.get(key) is not None:
            info[key] = kind(_scalar(row[key], 0))
    return info


def _dataset_digest(dataset: LeRobotDataset) -> str:
    """A hash of the dataset's metadata files (info and episode lists): cheap, and it changes with the dataset."""
    meta = dataset.root / "meta"
    files = [meta / "info.json", meta / "episodes.jsonl", *sorted((meta / "episodes").glob("chunk-*/file-*.parquet"))]
    return hashlib.sha256(
        "".join(f"{path.relative_to(meta)}:{file_sha256(path)}\n" for path in files if path.is_file()).encode()
    ).hexdigest()
