"""Files on the object store (SeaweedFS, STORAGE_BACKEND=s3) against local files, on one machine.

Storage-level figures, each with its ratio to local files:
- ingest: frames written as the ingest path writes them (`labeling.frame_files.frames_write`), frames/s;
- snapshot publish: a snapshot-sized folder (`train.pt`, `val.pt`) made visible (local: nothing to do);
- training start: the snapshot read into memory as a training run starts, cache cold and warm
  (targets: cold within 2x of local, warm within 1.1x);
- frame serving: one stored frame read as the media view reads it (local: exists, size, open; s3: one GET).

`python bench/object_store.py [--frames 2000] [--snapshot-mb 256]`; the object store is the one named by
RS_TEST_S3_ENDPOINT or one started here (tests/object_store.py)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.harness import parse_args, scratch_environment  # noqa: E402


def _frames(count: int, size: int) -> list[tuple[str, bytes]]:
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for i in range(count):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buffer, format="PNG")
        out.append((f"frames/bench/{i // 100}/{i}_main.png", buffer.getvalue()))
    return out


def _timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--frame-size", type=int, default=128)
    parser.add_argument("--snapshot-mb", type=int, default=256)
    parser.add_argument("--serve", type=int, default=200, help="frames read as the media view reads them")
    args = parse_args(parser, frames=40, snapshot_mb=4, serve=20)
    scratch = scratch_environment("object-store")
    import django

    django.setup()
    from django.core.files.storage import FileSystemStorage

    from labeling.frame_files import frames_write
    from tests.object_store import bucket_delete, ensure_object_store, fresh_bucket, s3_env
    from webapp.common.filestore.cache import FileCache
    from webapp.common.filestore.config import storage_config
    from webapp.common.filestore.publish import folder_publish, stored_fetch
    from webapp.common.filestore.s3 import AppServedS3Storage
    from webapp.common.filestore.store import object_read

    endpoint = ensure_object_store()
    env = s3_env(endpoint, fresh_bucket(endpoint))
    options = storage_config(
        "s3",
        bucket=env["S3_BUCKET"],
        endpoint_url=env["S3_ENDPOINT_URL"],
        access_key=env["S3_ACCESS_KEY_ID"],
        secret_key=env["S3_SECRET_ACCESS_KEY"],
        region=env["S3_REGION"],
        addressing_style=env["S3_ADDRESSING_STYLE"],
    )["OPTIONS"]
    storages = {"local": FileSystemStorage(location=scratch / "media"), "s3": AppServedS3Storage(**options)}
    frames = _frames(args.frames, args.frame_size)
    snapshot = scratch / "snapshot"
    snapshot.mkdir()
    for name in ("train.pt", "val.pt"):
        (snapshot / name).write_bytes(os.urandom(args.snapshot_mb * 1024 * 1024 // 2))
    figures: dict[str, dict[str, float]] = {"local": {}, "s3": {}}
    try:
        for kind, storage in storages.items():
            row = figures[kind]
            row["ingest frames/s"] = len(frames) / _timed(lambda storage=storage: frames_write(storage, frames))
            if kind == "local":
                row["snapshot publish s"] = 0.0
                files = [snapshot / "train.pt", snapshot / "val.pt"]
                row["training start cold s"] = _timed(lambda files=files: [f.read_bytes() for f in files])
                row["training start warm s"] = _timed(lambda files=files: [f.read_bytes() for f in files])
            else:
                row["snapshot publish s"] = _timed(
                    lambda storage=storage: folder_publish(storage, snapshot, "snapshots/bench")
                )
                cache = FileCache(Path(tempfile.mkdtemp(dir=scratch)), max_bytes=1 << 40)

                def start(cache=cache, storage=storage) -> None:
                    folder = cache.fetch("snapshots/bench", lambda n, t: stored_fetch(storage, n, t))
                    for name in ("train.pt", "val.pt"):
                        (folder / name).read_bytes()

                row["training start cold s"] = _timed(start)
                row["training start warm s"] = _timed(start)
            served = [name for name, _ in frames[: args.serve]]

            def serve(storage=storage, served=served, kind=kind) -> None:
                for name in served:
                    if kind == "s3":  # webapp.views.media: one GET
                        assert object_read(storage, name, 1 << 20) is not None
                    elif storage.exists(name) and storage.size(name):
                        with storage.open(name, "rb") as handle:
                            handle.read()

            row["frame serving ms/frame"] = 1000 * _timed(serve) / len(served)
    finally:
        bucket_delete(endpoint, env["S3_BUCKET"])
    print(f"frames {len(frames)} of {args.frame_size}x{args.frame_size} PNG, snapshot {args.snapshot_mb} MiB")
    print(f"{'figure':<26}{'local':>12}{'s3':>12}{'s3 cost':>9}")  # s3 cost: its time over local's
    for figure in figures["local"]:
        local, s3 = figures["local"][figure], figures["s3"][figure]
        cost = (local / s3 if figure.endswith("/s") else s3 / local) if local and s3 else None
        ratio = f"{cost:.2f}x" if cost is not None else "-"
        print(f"{figure:<26}{local:>12.4f}{s3:>12.4f}{ratio:>9}")
    print("targets: training start cold within 2x of local, warm within 1.1x")


if __name__ == "__main__":
    main()
