"""Ingest throughput and correctness under concurrency, against a running server.

    .venv/bin/python bench/ingest.py --url http://127.0.0.1:8000 --token "$(cat data/demo_agent_token.txt)"

1. Uploads episodes of 50 steps x 2 cameras x 128x128 PNG through the real API (chunks of 25 steps) and
   prints frames per second beside the raw rate of writing the same bytes to files on disk, measured in
   the same run (target: ingest >= 50% of raw).
2. Runs 50 concurrent uploads of different episodes, re-sending some chunks (retries), then asks the
   server for each episode and prints errors and duplicates found (target: 0 and 0).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import requests
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from training.synthetic import make_scene  # noqa: E402

STEPS, CAMERAS, SIZE, CHUNK = 50, ("main", "extra"), 128, 25


def make_frames(seed: int) -> list[dict[str, bytes]]:
    rng = np.random.default_rng(seed)
    frames = []
    for index in range(STEPS):
        per_camera = {}
        for camera in CAMERAS:
            buffer = io.BytesIO()
            Image.fromarray(make_scene(index > STEPS // 2, SIZE, rng)).save(buffer, format="PNG")
            per_camera[camera] = buffer.getvalue()
        frames.append(per_camera)
    return frames


def upload_episode(session: requests.Session, url: str, project: str, frames, retry_chunks=()) -> str:
    episode_id = str(uuid.uuid4())
    response = session.post(f"{url}/api/episodes", json={"project": project, "uuid": episode_id, "env_id": "bench"})
    response.raise_for_status()
    for start in range(0, STEPS, CHUNK):
        indices = range(start, min(start + CHUNK, STEPS))
        steps = [
            {"index": i, "action": [0.0] * 7, "reward": float(i > STEPS // 2), "success": i > STEPS // 2}
            for i in indices
        ]
        files = {f"frame.{i}.{c}": (f"{i}_{c}.png", frames[i][c], "image/png") for i in indices for c in CAMERAS}
        for _attempt in range(2 if start in retry_chunks else 1):
            response = session.post(
                f"{url}/api/episodes/{episode_id}/steps", data={"steps": json.dumps(steps)}, files=files
            )
            response.raise_for_status()
    session.post(f"{url}/api/episodes/{episode_id}/finish", json={}).raise_for_status()
    return episode_id


def raw_disk_rate(frames, episodes: int) -> float:
    with tempfile.TemporaryDirectory(dir=os.environ.get("MEDIA_ROOT")) as folder:
        start = time.perf_counter()
        for episode in range(episodes):
            target = Path(folder) / str(episode)
            target.mkdir()
            for index, per_camera in enumerate(frames):
                for camera, data in per_camera.items():
                    (target / f"{index:06d}_{camera}.png").write_bytes(data)
        elapsed = time.perf_counter() - start
    return episodes * STEPS * len(CAMERAS) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", default=os.environ.get("RS_TOKEN"))
    parser.add_argument("--project", default="PickCube demo")
    parser.add_argument("--episodes", type=int, default=6, help="episodes for the throughput part")
    parser.add_argument("--uploaders", type=int, default=2, help="agents uploading at once in the throughput part")
    parser.add_argument("--concurrent", type=int, default=50, help="concurrent uploads in the second part")
    args = parser.parse_args()
    if not args.token:
        token_file = Path("data/demo_agent_token.txt")
        if not token_file.exists():
            parser.error("pass --token (or run scripts/run.sh once so data/demo_agent_token.txt exists)")
        args.token = token_file.read_text().strip()

    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {args.token}"
    frames = make_frames(0)
    payload_mb = sum(len(b) for f in frames for b in f.values()) / 1e6
    print(f"episode: {STEPS} steps x {len(CAMERAS)} cameras x {SIZE}x{SIZE} PNG = {payload_mb:.2f} MB")

    upload_episode(session, args.url, args.project, frames)  # warm-up

    def sequential_uploads(count: int) -> None:
        with requests.Session() as own:
            own.headers["Authorization"] = f"Bearer {args.token}"
            for _ in range(count):
                upload_episode(own, args.url, args.project, frames)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.uploaders) as pool:
        list(pool.map(sequential_uploads, [args.episodes] * args.uploaders))
    api_rate = args.uploaders * args.episodes * STEPS * len(CAMERAS) / (time.perf_counter() - start)
    raw_rate = raw_disk_rate(frames, args.episodes * args.uploaders)
    print(f"ingest through the API ({args.uploaders} agents, chunks of {CHUNK} steps): {api_rate:8.0f} frames/s")
    print(f"raw write to disk:      {raw_rate:8.0f} frames/s")
    print(f"ratio: {api_rate / raw_rate:.2f} (target >= 0.50)")

    print(f"\n{args.concurrent} concurrent uploads, chunks 0 and 20 of every third episode sent twice")
    frame_sets = [make_frames(seed) for seed in range(1, 6)]

    def one(number: int):
        with requests.Session() as own:
            own.headers["Authorization"] = f"Bearer {args.token}"
            retries = (0, 20) if number % 3 == 0 else ()
            try:
                return upload_episode(own, args.url, args.project, frame_sets[number % 5], retries), None
            except requests.RequestException as exc:
                return None, f"{exc.__class__.__name__}: {exc}"

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.concurrent) as pool:
        results = list(pool.map(one, range(args.concurrent)))
    elapsed = time.perf_counter() - start
    errors = [error for _, error in results if error]
    duplicates = 0
    for episode_id, _ in results:
        if episode_id:
            detail = session.get(f"{args.url}/api/episodes/{episode_id}").json()
            duplicates += max(0, detail["num_steps"] - STEPS) + max(0, detail["num_frames"] - STEPS * len(CAMERAS))
            if detail["num_steps"] < STEPS or detail["num_frames"] < STEPS * len(CAMERAS):
                errors.append(f"episode {episode_id} incomplete: {detail['num_steps']} steps")
    frames_done = sum(1 for e, _ in results if e) * STEPS * len(CAMERAS)
    print(
        f"took {elapsed:.1f}s ({frames_done / elapsed:.0f} frames/s); errors: {len(errors)}; duplicates: {duplicates}"
    )
    for error in errors[:5]:
        print("  ", error)


if __name__ == "__main__":
    main()
