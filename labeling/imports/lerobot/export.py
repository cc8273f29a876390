"""Export a project's episodes and labels as a LeRobot dataset (v3.0 layout, labeling/imports/lerobot/writer.py).

One LeRobot episode per finished episode (in creation order), one frame per step, one H.264 video per
camera of the project (a step without that camera's frame gets a black frame; frames of another size are
resized to the camera's first frame size, rounded down to even sides). Per frame:
- `label` (int64): the frame label that counts (selectors.SOURCE_PRIORITY among `sources`; human labels by
  default): 1 success, 0 fail, -1 none;
- `next.success` (bool) and `next.reward` (float32, 1.0 or 0.0): that label as a success flag and a sparse reward;
- `next.done` (bool): the episode's last step;
- `env.reward` (float32) and `env.success` (bool): the step's reward and env success as ingested;
- `action` (float32 vector): when steps have actions, each padded with zeros (or cut) to the longest length.
The task is the project's task description (else its name); fps the `fps` argument.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import numpy as np
from django.core.files.storage import default_storage

from common.images.checks import decode_rgb
from projects.models import Project

from ...labels.selectors import effective_frame_labels
from ...models import Episode, Frame, FrameLabel, LabelSource, Step
from .writer import DatasetSpec, ExportEpisode, even_size, write_dataset

COLUMNS = {
    "label": "int64",
    "next.success": "bool",
    "next.reward": "float32",
    "next.done": "bool",
    "env.reward": "float32",
    "env.success": "bool",
}
LABEL_CODES: dict[str, int] = {FrameLabel.Value.SUCCESS: 1, FrameLabel.Value.FAIL: 0}


class ExportError(ValueError):
    """An export that cannot be made (too large, nothing to export); the message says why."""


def lerobot_export(
    *,
    project: Project,
    root: Path,
    max_frames: int,
    fps: int = 10,
    sources: tuple[str, ...] = (LabelSource.HUMAN,),
    on_episode: Callable[[int, int], None] | None = None,
) -> dict:
    """Write the project's dataset under `root` (created); returns its info.json dict. `on_episode(i, n)` is
    called as the writer starts episode i of n (and with i = n once all are written)."""
    episodes = list(Episode.objects.filter(project=project, status=Episode.Status.FINISHED).order_by("pk"))
    steps_total = sum(episode.num_steps for episode in episodes)
    if not episodes or not steps_total:
        raise ExportError(f"project {project.name!r} has no finished episodes with steps to export")
    if steps_total > max_frames:
        raise ExportError(
            f"the project has {steps_total} steps; one export holds at most {max_frames} (LEROBOT_EXPORT_MAX_FRAMES)"
        )
    frames = Frame.objects.filter(step__episode__project=project, step__episode__status=Episode.Status.FINISHED)
    cameras = {}
    for camera in project.camera_views or []:
        first = frames.filter(camera=camera).values("height", "width").first()
        if first:
            cameras[camera] = even_size(first["height"], first["width"])
    action_lengths = {len(a) for a in Step.objects.filter(episode__in=episodes).values_list("action", flat=True)}
    spec = DatasetSpec(fps=fps, cameras=cameras, columns=COLUMNS, action_dim=max(action_lengths, default=0))
    labels = {
        step_id: row["value"] for step_id, row in effective_frame_labels(project=project, sources=sources).items()
    }
    task = project.task_description or project.name

    def each() -> Iterator[ExportEpisode]:
        for i, episode in enumerate(episodes):
            if on_episode:
                on_episode(i, len(episodes))
            yield _episode(episode, spec, labels, task)

    info = write_dataset(root, spec, each())
    if on_episode:
        on_episode(len(episodes), len(episodes))
    return info


def lerobot_export_zip(
    *, project: Project, max_frames: int, fps: int = 10, on_episode: Callable[[int, int], None] | None = None
) -> IO[bytes]:
    """The export as a zip in an anonymous temporary file (gone when closed), positioned at its start."""
    folder = Path(tempfile.mkdtemp(prefix="rs-lerobot-export-"))
    try:
        root = folder / "dataset"
        lerobot_export(project=project, root=root, max_frames=max_frames, fps=fps, on_episode=on_episode)
        out = tempfile.TemporaryFile()  # noqa: SIM115 (returned open: the response closes it)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:  # parquet and mp4 are compressed already
            for path in sorted(root.rglob("*")):
                if path.is_file():
                    archive.write(path, path.relative_to(root).as_posix())
        out.seek(0)
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _episode(episode: Episode, spec: DatasetSpec, labels: dict[int, str], task: str) -> ExportEpisode:
    steps = list(Step.objects.filter(episode=episode).order_by("index").values("id", "action", "reward", "env_success"))
    codes = [LABEL_CODES.get(labels.get(step["id"], ""), -1) for step in steps]
    last = len(steps) - 1
    columns: dict[str, list] = {
        "label": codes,
        "next.success": [code == 1 for code in codes],
        "next.reward": [1.0 if code == 1 else 0.0 for code in codes],
        "next.done": [i == last for i in range(len(steps))],
        "env.reward": [float(step["reward"]) for step in steps],
        "env.success": [bool(step["env_success"]) for step in steps],
    }
    actions = [_padded(step["action"], spec.action_dim) for step in steps] if spec.action_dim else []
    step_ids = [step["id"] for step in steps]
    return ExportEpisode(
        task=task,
        columns=columns,
        actions=actions,
        frames={camera: _frames_reader(step_ids, camera, size) for camera, size in spec.cameras.items()},
    )


def _frames_reader(step_ids: list[int], camera: str, size: tuple[int, int]):
    def frames() -> Iterator[np.ndarray]:
        names = dict(Frame.objects.filter(step_id__in=step_ids, camera=camera).values_list("step_id", "image"))
        for step_id in step_ids:
            name = names.get(step_id)
            if name is None:
                yield np.zeros((*size, 3), np.uint8)
                continue
            with default_storage.open(name, "rb") as handle:
                yield decode_rgb(handle.read())

    return frames


def _padded(action, dim: int) -> list[float]:
    values = [float(v) for v in (action if isinstance(action, list) else [])][:dim]
    return values + [0.0] * (dim - len(values))
