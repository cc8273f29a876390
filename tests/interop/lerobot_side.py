"""Runs LeRobot's released dataset code in the LeRobot side environment (scripts/lib.sh `ensure_lerobot_env`).

Invoked by tests/interop/test_lerobot_dataset.py as `python lerobot_side.py COMMAND` with a JSON object on stdin;
prints one JSON object on stdout. It imports only `lerobot` (0.4.4, requirements-lerobot.txt) and the shared
libraries, never the project, so what it writes and reads is what a LeRobot user gets.

- `write`: a dataset made by `LeRobotDataset.create` / `add_frame` / `save_episode` / `finalize` (the v3.0
  layout, AV1 videos), episodes given as frame counts; frame i of episode e has known pixels (`pixel`).
- `read`: `LeRobotDataset(repo_id, root=...)` and its metadata; the label columns of every frame from its
  `hf_dataset`, and the first pixel of each frame of each camera from the video file LeRobot's metadata points
  at, decoded with PyAV (LeRobot 0.4.4 decodes with torchcodec, which needs system FFmpeg libraries this
  environment does not have, or torchvision's VideoReader, which torchvision 0.2x no longer has).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO_ID = "local/reward-studio-test"


def pixel(episode: int, frame: int, camera: int) -> int:
    return (40 * frame + 90 * episode + 120 * camera) % 250


def write(args: dict) -> dict:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    size = int(args.get("size", 64))
    cameras = args["cameras"]
    image = {"dtype": "video", "shape": (size, size, 3), "names": ["height", "width", "channels"]}
    features: dict[str, Any] = {f"observation.images.{camera}": image for camera in cameras}
    features |= {
        "observation.state": {"dtype": "float32", "shape": (2,), "names": None},
        "action": {"dtype": "float32", "shape": (2,), "names": None},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.success": {"dtype": "bool", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
    }
    dataset = LeRobotDataset.create(
        REPO_ID, fps=int(args["fps"]), root=args["root"], features=features, use_videos=True, image_writer_threads=0
    )
    for e, (length, success) in enumerate(zip(args["lengths"], args["success"], strict=True)):
        for i in range(length):
            frame: dict[str, Any] = {
                f"observation.images.{camera}": np.full((size, size, 3), pixel(e, i, c), np.uint8)
                for c, camera in enumerate(cameras)
            }
            last = i == length - 1
            frame |= {
                "observation.state": np.array([e, i], np.float32),
                "action": np.array([0.5 * i, -1.0], np.float32),
                "next.reward": np.array([1.0 if last and success else 0.0], np.float32),
                "next.success": np.array([last and success]),
                "next.done": np.array([last]),
                "task": args["task"],
            }
            dataset.add_frame(frame)
        dataset.save_episode()
    dataset.finalize()
    info = json.loads((Path(args["root"]) / "meta" / "info.json").read_text())
    return {"codebase_version": info["codebase_version"], "total_frames": info["total_frames"]}


def read(args: dict) -> dict:
    import av
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset(REPO_ID, root=args["root"], download_videos=False)
    columns = {key: dataset.hf_dataset[key] for key in args["columns"]}
    first_pixels: dict[str, list[int]] = {}
    for key in dataset.meta.video_keys:
        values = []
        for episode in range(dataset.meta.total_episodes):
            path = Path(args["root"]) / dataset.meta.get_video_file_path(episode, key)
            span = dataset.meta.episodes[episode]
            start, end = span[f"videos/{key}/from_timestamp"], span[f"videos/{key}/to_timestamp"]
            with av.open(str(path)) as container:
                for frame in container.decode(video=0):
                    if start - 1e-4 <= frame.time < end - 1e-4:
                        values.append(int(frame.to_ndarray(format="rgb24")[0, 0, 0]))
        first_pixels[key] = values
    return {
        "codebase_version": dataset.meta.info["codebase_version"],
        "fps": dataset.fps,
        "num_episodes": dataset.num_episodes,
        "num_frames": dataset.num_frames,
        "video_keys": dataset.meta.video_keys,
        "tasks": list(dataset.meta.tasks.index),
        "columns": {key: [_plain(v) for v in values] for key, values in columns.items()},
        "first_pixels": first_pixels,
    }


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        value = value.tolist()
    return value[0] if isinstance(value, list) and len(value) == 1 else value


COMMANDS = {"write": write, "read": read}


def main() -> None:
    args: dict[str, Any] = json.loads(sys.stdin.read() or "{}")
    result = COMMANDS[sys.argv[1]](args)
    sys.stdout.write("\n" + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
