"""LeRobot import and export throughput beside their raw limits, measured in the same run.

1. A LeRobot v3.0 dataset is written (labeling/imports/lerobot/writer.py: `--episodes` episodes of `--frames` frames,
   `--cameras` cameras of `--size` px, a moving square on a gradient, H.264).
2. Import (labeling/import_services.import_paths, what the import job's Celery task runs) into a fresh project:
   frames/s against the raw limit of the same work without the app, PyAV decoding every video plus the PNG
   encoding of every frame (common.images.checks.encode_array), in one process.
3. Export (labeling/imports/lerobot/export.py, lerobot_export) of that project: frames/s against the raw limit, reading and
   decoding every stored PNG plus H.264 encoding of each episode's frames.
CPU seconds per 1,000 frames are printed beside wall-clock figures: on a shared machine they stay meaningful.
Target: each ratio at least 0.5 (the app's own work, the database rows and the file writes, at most as much
again as decoding and encoding).

    .venv/bin/python bench/lerobot.py [--episodes 8] [--frames 100] [--cameras 2] [--size 128]

Self-contained: it migrates the database named by DATABASE_URL (default: an SQLite file in a temporary folder).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from harness import parse_args, scratch_environment  # noqa: E402

TARGET_RATIO = 0.5
T = TypeVar("T")


def synthetic_frames(episode: int, frames: int, size: int, camera: int):
    """A gradient with a square moving across it: frames an encoder must work on, unlike a solid colour."""
    ramp = np.linspace(0, 255, size, dtype=np.float32)
    base = (ramp[None, :, None] * np.array([1.0, 0.5, 0.25]) + 40 * camera) % 256
    for i in range(frames):
        frame = np.broadcast_to(base, (size, size, 3)).astype(np.uint8).copy()
        x = (i * 3 + episode * 7) % max(1, size - size // 4)
        frame[size // 3 : size // 3 + size // 4, x : x + size // 4] = (200, 30, 30)
        yield frame


def timed(work: Callable[[], T]) -> tuple[float, float, T]:
    """Wall seconds, CPU seconds (this process) and the result of work()."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--size", type=int, default=128)
    args = parse_args(parser, episodes=2, frames=6, cameras=1, size=32)

    scratch = scratch_environment("lerobot")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django.conf import settings

    from common.images.checks import decode_rgb, encode_array
    from labeling.imports.lerobot.export import lerobot_export
    from labeling.imports.lerobot.writer import DatasetSpec, ExportEpisode, write_dataset
    from labeling.imports.services import import_paths
    from labeling.imports.video_frames import VideoLimits, decode_frames, encode_frames
    from labeling.models import Frame
    from projects.models import Project

    cameras = [f"cam{c}" for c in range(args.cameras)]
    spec = DatasetSpec(fps=10, cameras={c: (args.size, args.size) for c in cameras}, columns={"next.success": "bool"})
    episodes = [
        ExportEpisode(
            task="bench",
            columns={"next.success": [i == args.frames - 1 for i in range(args.frames)]},
            frames={c: partial(synthetic_frames, e, args.frames, args.size, k) for k, c in enumerate(cameras)},
        )
        for e in range(args.episodes)
    ]
    dataset = scratch / "dataset"
    write_dataset(dataset, spec, episodes)
    total = args.episodes * args.frames * args.cameras
    videos = sorted(dataset.rglob("*.mp4"))
    limits = VideoLimits(max_frames=10**9, max_side=settings.MAX_IMAGE_SIDE, max_pixels=settings.MAX_IMAGE_PIXELS)

    def raw_import() -> int:
        count = 0
        for path in videos:
            for array in decode_frames(path, limits):
                encode_array(array, max_side=limits.max_side, max_pixels=limits.max_pixels)
                count += 1
        return count

    project = Project.objects.create(name="Bench LeRobot", camera_views=cameras)
    raw_in = timed(raw_import)
    service_in = timed(lambda: import_paths(project=project, paths=[dataset]))
    summary = service_in[2]
    assert raw_in[2] == total and summary.frames == total and not summary.failed, (raw_in[2], summary.lines())

    stored = list(
        Frame.objects.filter(step__episode__project=project).order_by("step__episode_id", "camera", "step__index")
    )

    def raw_export() -> int:
        out = scratch / "raw-export"
        out.mkdir()
        for number, start in enumerate(range(0, len(stored), args.frames)):
            arrays = []
            for frame in stored[start : start + args.frames]:
                with frame.image.open("rb") as handle:
                    arrays.append(decode_rgb(handle.read()))
            encode_frames(out / f"{number}.mp4", arrays, fps=10)
        return len(stored)

    raw_out = timed(raw_export)
    service_out = timed(lambda: lerobot_export(project=project, root=scratch / "export", max_frames=10**9))
    assert service_out[2]["total_frames"] * args.cameras == total

    print(f"dataset: {args.episodes} episodes x {args.frames} frames x {args.cameras} camera(s) at {args.size} px")
    print(f"database: {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}")
    print(f"{'measure (frames/s)':<34}{'service':>10}{'raw limit':>11}{'ratio':>8}{'target':>9}")
    for name, service, raw in (
        ("import (decode, store)", service_in, raw_in),
        ("export (read, encode)", service_out, raw_out),
    ):
        rate, limit = total / service[0], total / raw[0]
        print(f"{name:<34}{rate:>10.0f}{limit:>11.0f}{rate / limit:>8.2f}{'>= ' + str(TARGET_RATIO):>9}")
        cpu, raw_cpu = 1000 * service[1] / total, 1000 * raw[1] / total
        print(f"  CPU s per 1,000 frames: service {cpu:.2f}, raw {raw_cpu:.2f}")


if __name__ == "__main__":
    main()
