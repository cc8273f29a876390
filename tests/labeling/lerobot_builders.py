"""Small LeRobot datasets and mp4 files for the import and export tests (a few 64x64 frames each).

`write_v21_dataset` is a fixture writer that follows LeRobot's published v2.1 layout (meta/info.json,
meta/episodes.jsonl, meta/tasks.jsonl, one parquet file and one mp4 per camera per episode), since the LeRobot
release that installs here (0.4.4, tests/interop/lerobot_side.py) writes v3.0 only. v3.0 datasets written by
LeRobot's own code are imported in tests/interop/test_lerobot_dataset.py.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from common.images.checks import decode_rgb
from labeling.imports.video_frames import encode_frames

SIZE = 64


def pixel(episode: int, frame: int, camera: int) -> int:
    return (40 * frame + 90 * episode + 120 * camera) % 250


def solid_frames(episode: int, count: int, camera: int = 0) -> list[np.ndarray]:
    return [np.full((SIZE, SIZE, 3), pixel(episode, i, camera), np.uint8) for i in range(count)]


def write_mp4(path: Path, frames: list[np.ndarray], fps: int = 10) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    encode_frames(path, frames, fps=fps)
    return path


def write_v21_dataset(
    root: Path, *, lengths: list[int], cameras: list[str], fps: int = 10, dtype: str = "video"
) -> Path:
    """Episode e ends in success when e is even (`next.success` on its last frame). dtype "image": frames as
    PNG bytes in the parquet rows ({"bytes", "path"}, as the datasets library stores an Image feature)."""
    video = {"dtype": dtype, "shape": [SIZE, SIZE, 3], "names": ["height", "width", "channels"]}
    scalar = {"shape": [1], "names": None}
    features = {f"observation.images.{c}": video for c in cameras} | {
        "action": {"dtype": "float32", "shape": [2], "names": None},
        "next.reward": {"dtype": "float32"} | scalar,
        "next.success": {"dtype": "bool"} | scalar,
        "next.done": {"dtype": "bool"} | scalar,
        "timestamp": {"dtype": "float32"} | scalar,
        "frame_index": {"dtype": "int64"} | scalar,
        "episode_index": {"dtype": "int64"} | scalar,
        "index": {"dtype": "int64"} | scalar,
        "task_index": {"dtype": "int64"} | scalar,
    }
    info = {
        "codebase_version": "v2.1",
        "fps": fps,
        "chunks_size": 1000,
        "total_episodes": len(lengths),
        "total_frames": sum(lengths),
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
        "features": features,
    }
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (root / "meta" / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": "stack the cubes"}) + "\n")
    episodes = [{"episode_index": e, "tasks": ["stack the cubes"], "length": n} for e, n in enumerate(lengths)]
    (root / "meta" / "episodes.jsonl").write_text("".join(json.dumps(row) + "\n" for row in episodes))
    start = 0
    for e, n in enumerate(lengths):
        last = [i == n - 1 for i in range(n)]
        success = [flag and e % 2 == 0 for flag in last]
        images = {
            f"observation.images.{camera}": pa.array(
                [{"bytes": _png(frame), "path": f"frame_{i:06d}.png"} for i, frame in enumerate(solid_frames(e, n, c))]
            )
            for c, camera in enumerate(cameras)
            if dtype == "image"
        }
        table = pa.table(
            images
            | {
                "action": pa.FixedSizeListArray.from_arrays(
                    pa.array([v for i in range(n) for v in (i, -i)], pa.float32()), 2
                ),
                "next.reward": pa.array([float(s) for s in success], pa.float32()),
                "next.success": pa.array(success),
                "next.done": pa.array(last),
                "timestamp": pa.array([i / fps for i in range(n)], pa.float32()),
                "frame_index": pa.array(range(n), pa.int64()),
                "episode_index": pa.array([e] * n, pa.int64()),
                "index": pa.array(range(start, start + n), pa.int64()),
                "task_index": pa.array([0] * n, pa.int64()),
            }
        )
        data = root / "data" / "chunk-000" / f"episode_{e:06d}.parquet"
        data.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, data)
        for c, camera in enumerate(cameras if dtype == "video" else []):
            key = f"observation.images.{camera}"
            write_mp4(root / "videos" / "chunk-000" / key / f"episode_{e:06d}.mp4", solid_frames(e, n, c), fps)
        start += n
    return root


def first_pixels(episode, camera: str) -> list[int]:
    """The red level of the top-left pixel of each stored frame of `camera` in the episode, in step order."""
    from labeling.models import Frame

    values = []
    for frame in Frame.objects.filter(step__episode=episode, camera=camera).order_by("step__index"):
        with frame.image.open("rb") as handle:
            values.append(int(decode_rgb(handle.read())[0, 0, 0]))
    return values


def close(got: list[int], want: list[int]) -> bool:
    """Equal lengths and every level within 3 (the codecs are lossy; the frames are solid colours)."""
    return len(got) == len(want) and int(np.abs(np.array(got) - np.array(want)).max()) <= 3


def _png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()
