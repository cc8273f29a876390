"""LeRobot datasets on disk, read as plain Python: the layouts LeRobot writes, v2.0/v2.1 and v3.0.

A dataset folder holds `meta/info.json` (`codebase_version`, `fps`, `features`, `data_path`, `video_path`,
`chunks_size`) and
- v3.0: `meta/episodes/chunk-XXX/file-XXX.parquet` (one row per episode: `episode_index`, `tasks`, `length`,
  `data/chunk_index`, `data/file_index`, and per video key `videos/<key>/chunk_index`, `file_index`,
  `from_timestamp`, `to_timestamp`), data files holding many episodes, video files holding many episodes
  one after another (each episode a time range);
- v2.x: `meta/episodes.jsonl` (`episode_index`, `tasks`, `length`), one data file and one video per camera
  per episode (`data/chunk-XXX/episode_XXXXXX.parquet`, `videos/chunk-XXX/<key>/episode_XXXXXX.mp4`).
Frame columns: `frame_index`, `timestamp`, `episode_index`, `index`, `task_index`, `action`, `observation.*`
and optionally `next.reward`, `next.done`, `next.success`. Cameras are the features of dtype `video` (frames in
mp4) or `image` (PNG/JPEG bytes in the parquet rows), keyed `observation.images.<camera>`.

RLinf 0.3.0's `CollectEpisode` wrapper (`export_format="lerobot"`, through `rlinf/data/lerobot_writer.py`) names
its columns otherwise: `actions`, `state`, `done`, `is_success` (the episode's outcome, on every frame),
`intervene_flag`, `segment_id`, and image features `image`, `wrist_image` and `extra_view_image` (several views:
`extra_view_image-0`, `-1`, ...). RLINF_CAMERAS names its cameras as the RLinf pickle import does.

Every path a template in info.json makes is checked to stay inside the dataset folder. No Django imports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sources import SourceError

INFO_PATH = Path("meta") / "info.json"
MAX_META_BYTES = 16 * 1024 * 1024  # info.json, episodes.jsonl, tasks.jsonl
MAX_PARQUET_BYTES = 2 * 1024**3
SUPPORTED_VERSIONS = ("v2.0", "v2.1", "v3.0")
IMAGE_PREFIX = "observation.images."
LEROBOT_COLUMNS = (
    "frame_index",
    "timestamp",
    "action",
    "next.reward",
    "next.done",
    "next.success",
    "observation.state",
)
RLINF_COLUMNS = ("actions", "state", "done", "is_success", "intervene_flag", "segment_id")
# Our own export (labeling/imports/lerobot/export.py): the frame label (1 success, 0 fail, -1 none) and the env's own
# reward and success, apart from `next.success`/`next.reward` (which carry the label there).
EXPORT_COLUMNS = ("label", "env.reward", "env.success")
FRAME_COLUMNS = LEROBOT_COLUMNS + RLINF_COLUMNS + EXPORT_COLUMNS
RLINF_CAMERAS = {"image": "main", "wrist_image": "wrist", "extra_view_image": "extra"}


@dataclass(frozen=True)
class VideoSpan:
    path: Path
    start_s: float | None = None  # v3.0: the episode's range in a file shared by several episodes
    end_s: float | None = None


@dataclass(frozen=True)
class EpisodeRef:
    index: int
    length: int
    task: str
    data_path: Path
    videos: dict[str, VideoSpan] = field(default_factory=dict)


@dataclass(frozen=True)
class LeRobotDataset:
    root: Path
    version: str
    fps: float
    features: dict[str, dict]
    episodes: list[EpisodeRef]

    @property
    def camera_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft.get("dtype") in ("video", "image")]

    @property
    def video_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft.get("dtype") == "video"]


def camera_name(key: str) -> str:
    """`observation.images.front` -> `front`; `observation.image` -> `image`; RLinf's `image` -> `main`,
    `extra_view_image` -> `extra`, `extra_view_image-1` -> `extra_1` (and the same for `wrist_image`)."""
    base, _, view = key.partition("-")
    if base in RLINF_CAMERAS and (view == "" or view.isdigit()):
        name = RLINF_CAMERAS[base]
        return name if view in ("", "0") else f"{name}_{view}"
    return key[len(IMAGE_PREFIX) :] if key.startswith(IMAGE_PREFIX) else key.rsplit(".", 1)[-1]


def map_cameras(keys: list[str], cameras: list[str]) -> dict[str, str]:
    """Dataset camera key -> project camera: same names first, then the others in order onto the project's
    remaining cameras. Keys left over (more cameras than the project has) are not in the result."""
    mapping = {key: camera_name(key) for key in keys if camera_name(key) in cameras}
    free = [camera for camera in cameras if camera not in mapping.values()]
    for key in keys:
        if key not in mapping and free:
            mapping[key] = free.pop(0)
    return mapping


def read_dataset(root: Path, *, max_episodes: int) -> LeRobotDataset:
    """The dataset's metadata and episode list; raises SourceError saying what is wrong or missing."""
    info = _json(root / INFO_PATH)
    if not isinstance(info, dict):
        raise SourceError("meta/info.json: not a JSON object")
    version = str(info.get("codebase_version", ""))
    if version not in SUPPORTED_VERSIONS:
        raise SourceError(
            f"meta/info.json: codebase_version {version or '(none)'} is not supported; "
            f"expected one of {', '.join(SUPPORTED_VERSIONS)} (convert older datasets with LeRobot's own scripts)"
        )
    features = info.get("features")
    fps = info.get("fps")
    if not isinstance(features, dict) or not isinstance(fps, int | float) or fps <= 0:
        raise SourceError("meta/info.json: needs `features` (an object) and `fps` (a positive number)")
    for key in ("data_path",) + (("video_path",) if any(f.get("dtype") == "video" for f in features.values()) else ()):
        if not isinstance(info.get(key), str):
            raise SourceError(f"meta/info.json: `{key}` is missing")
    reader = _episodes_v3 if version == "v3.0" else _episodes_v2
    episodes = list(reader(root, info, features, max_episodes))
    if not episodes:
        raise SourceError("the dataset lists no episodes")
    return LeRobotDataset(root, version, float(fps), features, episodes)


def episode_rows(dataset: LeRobotDataset, ref: EpisodeRef) -> list[dict[str, Any]]:
    """The episode's frame rows (FRAME_COLUMNS and image columns that exist), in frame_index order."""
    import pyarrow.parquet as pq

    _check_file(dataset.root, ref.data_path, MAX_PARQUET_BYTES)
    try:
        schema = pq.read_schema(ref.data_path)
        wanted = [
            c for c in (*FRAME_COLUMNS, *dataset.camera_keys) if c in schema.names and c not in dataset.video_keys
        ]
        table = pq.read_table(
            ref.data_path, columns=wanted + ["episode_index"], filters=[("episode_index", "=", ref.index)]
        )
    except Exception as exc:  # pyarrow raises several kinds for a damaged or foreign file
        raise SourceError(f"{_rel(dataset.root, ref.data_path)}: not a readable parquet file ({exc})") from None
    rows = table.to_pylist()
    if len(rows) != ref.length:
        raise SourceError(
            f"episode {ref.index}: meta lists {ref.length} frames, {_rel(dataset.root, ref.data_path)} has {len(rows)}"
        )
    return sorted(rows, key=lambda row: row.get("frame_index", 0))


def _episodes_v3(root: Path, info: dict, features: dict, max_episodes: int) -> Iterator[EpisodeRef]:
    import pyarrow.parquet as pq

    files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    if not files:
        raise SourceError(
            "meta/episodes/: no chunk-XXX/file-XXX.parquet files (a v3.0 dataset lists its episodes there)"
        )
    tasks = _tasks_v3(root)
    video_keys = [key for key, ft in features.items() if ft.get("dtype") == "video"]
    count = 0
    for path in files:
        _check_file(root, path, MAX_PARQUET_BYTES)
        try:
            schema = pq.read_schema(path)
            columns = [name for name in schema.names if not name.startswith("stats/")]
            rows = pq.read_table(path, columns=columns).to_pylist()
        except Exception as exc:
            raise SourceError(f"{_rel(root, path)}: not a readable parquet file ({exc})") from None
        for row in rows:
            count += 1
            if count > max_episodes:
                raise SourceError(f"the dataset has more than {max_episodes} episodes (LEROBOT_MAX_EPISODES)")
            try:
                index = int(row["episode_index"])
                data = _template(
                    root, info["data_path"], chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
                )
                videos = {
                    key: VideoSpan(
                        _template(
                            root,
                            info["video_path"],
                            video_key=key,
                            chunk_index=row[f"videos/{key}/chunk_index"],
                            file_index=row[f"videos/{key}/file_index"],
                        ),
                        float(row[f"videos/{key}/from_timestamp"]),
                        float(row[f"videos/{key}/to_timestamp"]),
                    )
                    for key in video_keys
                }
                task_list = row.get("tasks") or []
                yield EpisodeRef(
                    index, int(row["length"]), str(task_list[0]) if task_list else tasks.get(0, ""), data, videos
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise SourceError(
                    f"{_rel(root, path)}: episode row without {exc} (not a LeRobot v3.0 episodes file)"
                ) from None


def _episodes_v2(root: Path, info: dict, features: dict, max_episodes: int) -> Iterator[EpisodeRef]:
    path = root / "meta" / "episodes.jsonl"
    tasks = {
        int(row["task_index"]): str(row["task"]) for row in _jsonl(root, root / "meta" / "tasks.jsonl", missing_ok=True)
    }
    chunks_size = int(info.get("chunks_size") or 1000)
    video_keys = [key for key, ft in features.items() if ft.get("dtype") == "video"]
    for count, row in enumerate(_jsonl(root, path), start=1):
        if count > max_episodes:
            raise SourceError(f"the dataset has more than {max_episodes} episodes (LEROBOT_MAX_EPISODES)")
        try:
            index = int(row["episode_index"])
            chunk = index // chunks_size
            data = _template(root, info["data_path"], episode_chunk=chunk, episode_index=index)
            videos = {
                key: VideoSpan(
                    _template(root, info["video_path"], episode_chunk=chunk, video_key=key, episode_index=index)
                )
                for key in video_keys
            }
            task_list = row.get("tasks") or []
            yield EpisodeRef(
                index, int(row["length"]), str(task_list[0]) if task_list else tasks.get(0, ""), data, videos
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SourceError(f"meta/episodes.jsonl line {count}: missing or bad {exc}") from None


def _tasks_v3(root: Path) -> dict[int, str]:
    path = root / "meta" / "tasks.parquet"
    if not path.is_file():
        return {}
    import pyarrow.parquet as pq

    _check_file(root, path, MAX_META_BYTES)
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise SourceError(f"meta/tasks.parquet: not a readable parquet file ({exc})") from None
    names = [n for n in table.column_names if n != "task_index"]  # the task text is the pandas index column
    if "task_index" not in table.column_names or not names:
        return {}
    return {int(i): str(t) for i, t in zip(table["task_index"].to_pylist(), table[names[0]].to_pylist(), strict=True)}


def _template(root: Path, template: str, **values: Any) -> Path:
    try:
        relative = template.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise SourceError(f"meta/info.json: path template {template!r} needs {exc}") from None
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):
        raise SourceError(f"meta/info.json: path template {template!r} points outside the dataset")
    return path


def _check_file(root: Path, path: Path, max_bytes: int) -> None:
    if not path.is_file() or path.is_symlink():
        raise SourceError(f"{_rel(root, path)}: missing (the dataset's metadata names it)")
    if path.stat().st_size > max_bytes:
        raise SourceError(f"{_rel(root, path)}: larger than {max_bytes} bytes")


def _rel(root: Path, path: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return path.name


def _json(path: Path) -> Any:
    _check_file(path.parents[1], path, MAX_META_BYTES)
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(f"{path.parent.name}/{path.name}: not valid JSON ({exc})") from None


def _jsonl(root: Path, path: Path, *, missing_ok: bool = False) -> list[dict]:
    if missing_ok and not path.is_file():
        return []
    _check_file(root, path, MAX_META_BYTES)
    rows = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SourceError(f"{_rel(root, path)} line {number}: not valid JSON ({exc})") from None
        if not isinstance(row, dict):
            raise SourceError(f"{_rel(root, path)} line {number}: not a JSON object")
        rows.append(row)
    return rows
