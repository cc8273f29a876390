"""Write a LeRobot dataset (the v3.0 layout LeRobot 0.4 reads) from episodes given as plain Python.

Layout written (one data file and one video per camera per episode, so nothing is held for more than one
episode): `meta/info.json`, `meta/tasks.parquet`, `meta/episodes/chunk-000/file-000.parquet`,
`data/chunk-CCC/file-FFF.parquet`, `videos/observation.images.<camera>/chunk-CCC/file-FFF.mp4` (H.264,
yuv420p), file index = episode index % 1000, chunk = episode index // 1000. Frame columns: `timestamp`,
`frame_index`, `episode_index`, `index`, `task_index`, the float32/bool/int64 columns the caller names, and
`action` (float32 vector) when given. No Django imports.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..video_frames import encode_frames

CHUNKS_SIZE = 1000
CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
PYARROW_TYPES = {"float32": "float32", "bool": "bool_", "int64": "int64"}


@dataclass
class ExportEpisode:
    task: str
    columns: dict[str, list]  # column name -> one value per frame (types as in DatasetSpec.columns)
    actions: list[list[float]] = field(default_factory=list)  # one per frame, all action_dim long; or none
    frames: dict[str, Callable[[], Iterator[np.ndarray]]] = field(default_factory=dict)  # camera -> RGB frames

    @property
    def length(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else len(self.actions)


@dataclass(frozen=True)
class DatasetSpec:
    fps: int
    cameras: dict[str, tuple[int, int]]  # camera -> (height, width), even numbers
    columns: dict[str, str]  # column name -> "float32" | "bool" | "int64"
    action_dim: int = 0
    robot_type: str | None = None


def write_dataset(root: Path, spec: DatasetSpec, episodes: Iterable[ExportEpisode]) -> dict:
    """Write every episode under `root` (which must not exist yet) and the metadata; returns info.json's dict."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True)
    tasks: dict[str, int] = {}
    rows: list[dict] = []
    total = 0
    for e, episode in enumerate(episodes):
        length = episode.length
        task_index = tasks.setdefault(episode.task, len(tasks))
        place = {"chunk_index": e // CHUNKS_SIZE, "file_index": e % CHUNKS_SIZE}
        table = {
            "timestamp": pa.array([i / spec.fps for i in range(length)], pa.float32()),
            "frame_index": pa.array(range(length), pa.int64()),
            "episode_index": pa.array([e] * length, pa.int64()),
            "index": pa.array(range(total, total + length), pa.int64()),
            "task_index": pa.array([task_index] * length, pa.int64()),
        }
        for name, kind in spec.columns.items():
            table[name] = pa.array(episode.columns[name], getattr(pa, PYARROW_TYPES[kind])())
        if spec.action_dim:
            flat = pa.array(np.asarray(episode.actions, np.float32).reshape(-1))
            table["action"] = pa.FixedSizeListArray.from_arrays(flat, spec.action_dim)
        data_path = root / DATA_PATH.format(**place)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(table), data_path)
        row = {
            "episode_index": e,
            "tasks": [episode.task],
            "length": length,
            "data/chunk_index": place["chunk_index"],
            "data/file_index": place["file_index"],
            "dataset_from_index": total,
            "dataset_to_index": total + length,
        }
        for camera, (height, width) in spec.cameras.items():
            key = f"observation.images.{camera}"
            video = root / VIDEO_PATH.format(video_key=key, **place)
            video.parent.mkdir(parents=True, exist_ok=True)
            written = encode_frames(video, _sized(episode.frames[camera](), height, width), fps=spec.fps)
            if written != length:
                raise ValueError(f"episode {e} camera {camera}: {written} frames for {length} steps")
            row |= {
                f"videos/{key}/chunk_index": place["chunk_index"],
                f"videos/{key}/file_index": place["file_index"],
                f"videos/{key}/from_timestamp": 0.0,
                f"videos/{key}/to_timestamp": length / spec.fps,
            }
        row |= {"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
        rows.append(row)
        total += length
    meta = root / "meta"
    (meta / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), meta / "episodes" / "chunk-000" / "file-000.parquet")
    task_table = pa.table({"task_index": pa.array(list(tasks.values()), pa.int64()), "__index_level_0__": list(tasks)})
    pandas_index = {"index_columns": ["__index_level_0__"], "columns": [], "column_indexes": []}
    task_table = task_table.replace_schema_metadata({"pandas": json.dumps(pandas_index | _pandas_columns(task_table))})
    pq.write_table(task_table, meta / "tasks.parquet")
    info = _info(spec, episodes=len(rows), frames=total, tasks=len(tasks))
    (meta / "info.json").write_text(json.dumps(info, indent=4))
    return info


def even_size(height: int, width: int) -> tuple[int, int]:
    """H.264 in yuv420p needs even sides."""
    return max(2, height - height % 2), max(2, width - width % 2)


def _sized(frames: Iterator[np.ndarray], height: int, width: int) -> Iterator[np.ndarray]:
    from PIL import Image

    for frame in frames:
        if frame.shape[:2] != (height, width):
            frame = np.asarray(Image.fromarray(frame).resize((width, height), Image.Resampling.BILINEAR))
        yield frame


def _pandas_columns(table) -> dict:
    """pandas metadata so that pandas.read_parquet (LeRobot's load_tasks) indexes tasks by their text."""
    columns = [
        {"name": name, "field_name": name, "pandas_type": "int64", "numpy_type": "int64", "metadata": None}
        for name in table.column_names
        if name != "__index_level_0__"
    ]
    index = {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object"}
    return {"columns": [*columns, index | {"metadata": None}], "pandas_version": "2.2.3"}


def _info(spec: DatasetSpec, *, episodes: int, frames: int, tasks: int) -> dict:
    scalar = {"shape": [1], "names": None}
    features: dict[str, dict] = {}
    for camera, (height, width) in spec.cameras.items():
        features[f"observation.images.{camera}"] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": height,
                "video.width": width,
                "video.codec": "h264",
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": spec.fps,
                "video.channels": 3,
                "has_audio": False,
            },
        }
    if spec.action_dim:
        features["action"] = {"dtype": "float32", "shape": [spec.action_dim], "names": None}
    features |= {name: {"dtype": kind} | scalar for name, kind in spec.columns.items()}
    features |= {
        "timestamp": {"dtype": "float32"} | scalar,
        "frame_index": {"dtype": "int64"} | scalar,
        "episode_index": {"dtype": "int64"} | scalar,
        "index": {"dtype": "int64"} | scalar,
        "task_index": {"dtype": "int64"} | scalar,
    }
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": spec.robot_type,
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": spec.fps,
        "splits": {"train": f"0:{episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH,
        "features": features,
    }
