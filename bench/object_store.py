"""Files on the object store (SeaweedFS, STORAGE_BACKEND=s3) against local files, on one machine.

Storage-level figures, each with its ratio to local files:
- ingest: frames written as the ingest path writes them (`labeling.frame_files.frames_write`), frames/s;
- snapshot publish: a snapshot (`train.pt`, `val.pt`: payloads of random frames) made visible (local: nothing);
- training start: time to the first training step, as `training.resnet.runner` starts (the snapshot's local
  path, both payloads read, ResNet-18 built, one step), cache cold and warm (targets: cold within 2x of local,
  warm within 1.1x). Cold local reads the payloads from disk (their pages dropped from the OS page cache with
  `posix_fadvise`); cold s3 starts from an empty cache (the store's own files may still be in the page cache),
  its fetch alone is `snapshot fetch cold s`;
- frame serving: one stored frame read as the media view reads it (local: exists, size, open; s3: one GET).

`python bench/object_store.py [--frames 2000] [--snapshot-mb 256] [--repeat 3]`; the object store is the one named by
RS_TEST_S3_ENDPOINT or one started here (tests/object_store.py)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
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


def _payloads(folder: Path, mib: int, size: int) -> None:
    """train.pt and val.pt as a snapshot build writes them (uint8 HxWx3 frames, labels), `mib` MiB together."""
    import torch

    count = max(4, mib * 1024 * 1024 // (size * size * 3))
    generator = torch.Generator().manual_seed(0)
    for name, part in (("train.pt", count - count // 5), ("val.pt", count // 5)):
        images = [torch.randint(0, 256, (size, size, 3), dtype=torch.uint8, generator=generator) for _ in range(part)]
        torch.save({"images": images, "labels": [i % 2 for i in range(part)], "metadata": {}}, folder / name)


def _page_cache_drop(folder: Path) -> None:
    """Forget the folder's files' pages (written back first), so the next read comes from the disk."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


class _FirstStep:
    """A reporter that stops the run at its first training step (before the second one)."""

    def __init__(self) -> None:
        self.asked = 0

    def should_cancel(self) -> bool:
        self.asked += 1
        return self.asked > 1

    def report_step(self, *args, **kwargs) -> None: ...
    def report_epoch(self, *args, **kwargs) -> None: ...
    def log(self, line: str) -> None: ...
    def resumed(self, *, step: int) -> None: ...


PHASES = ("lookup", "read", "step")  # the snapshot's local folder; train.pt + val.pt read; model built, one step


def _first_step(folder_of, size: int, scratch: Path) -> dict[str, tuple[float, float]]:
    """(wall s, process CPU s) of each phase from asking for the snapshot's local folder to the end of the first
    training step, and of the whole (`total`)."""
    from training.datasets.rlinf_binary import read_payload
    from training.kit.reporting import JobCancelled
    from training.resnet.config import ResNetConfig
    from training.resnet.train import train_reward_model

    config = ResNetConfig.from_dict({"image_size": [3, size, size], "num_threads": 2, "device": "cpu"})
    marks = [(time.perf_counter(), time.process_time())]
    folder = folder_of()
    marks.append((time.perf_counter(), time.process_time()))
    train, val = read_payload(folder / "train.pt"), read_payload(folder / "val.pt")
    marks.append((time.perf_counter(), time.process_time()))
    with contextlib.suppress(JobCancelled):
        train_reward_model(
            config,
            train["images"],
            train["labels"],
            val["images"],
            val["labels"],
            out_dir=scratch / "run",
            reporter=_FirstStep(),  # type: ignore[arg-type]
        )
    marks.append((time.perf_counter(), time.process_time()))
    out = {phase: (marks[n + 1][0] - marks[n][0], marks[n + 1][1] - marks[n][1]) for n, phase in enumerate(PHASES)}
    out["total"] = (marks[-1][0] - marks[0][0], marks[-1][1] - marks[0][1])
    return out


def _training_starts(figures, s3, snapshot: Path, scratch: Path, args) -> None:
    """Snapshot fetch and time to the first step, local and s3 taken in turns (the machine's load drifts; the
    order alternates each round), each figure the least of `args.repeat`. The warm starts are also printed by
    phase, wall and CPU time, least and median: the s3 warm start's lookup is what a job's first run does (the
    cache entry, no request); a retried run's lookup (one GET more: an earlier run's published copy) is timed
    alone with the others, 200 times each."""
    from common.filestore.cache import FileCache
    from common.filestore.publish import folder_manifest, stored_fetch

    def local_cold() -> Path:
        _page_cache_drop(snapshot)
        return snapshot

    def cold_cache() -> FileCache:
        (scratch / "cold").mkdir(exist_ok=True)
        return FileCache(Path(tempfile.mkdtemp(dir=scratch / "cold")), max_bytes=1 << 40)

    def fetch(cache: FileCache) -> Path:
        return cache.fetch("snapshots/bench", lambda n, t: stored_fetch(s3, n, t))

    def s3_warm() -> Path:
        return fetch(warm)  # a job's first run asks the store nothing more (work_folder_resume)

    def s3_warm_retried() -> Path:
        folder = fetch(warm)
        folder_manifest(s3, "checkpoints/bench-job")  # work_folder_resume: an earlier run's published copy
        return folder

    print("load average at the start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    warm = FileCache(scratch / "warm", max_bytes=1 << 40)
    fetch(warm)
    _first_step(lambda: snapshot, args.frame_size, scratch)  # one-time costs (imports, kernels) apart
    lookups = {"local": lambda: snapshot, "s3": s3_warm, "s3 retried run": s3_warm_retried}
    lookup_ms = {kind: sorted(1000 * _timed(work) for _ in range(200)) for kind, work in lookups.items()}
    runs: dict[tuple[str, str], list[float]] = {}
    phases: dict[str, list[dict[str, tuple[float, float]]]] = {"local": [], "s3": []}
    for round_ in range(args.repeat):
        cold = [
            (("local", "training start cold s"), lambda: _first_step(local_cold, args.frame_size, scratch)),
            (
                ("s3", "training start cold s"),
                lambda: _first_step(lambda: fetch(cold_cache()), args.frame_size, scratch),
            ),
        ]
        warm_runs = [
            (("local", "training start warm s"), lambda: _first_step(lookups["local"], args.frame_size, scratch)),
            (("s3", "training start warm s"), lambda: _first_step(lookups["s3"], args.frame_size, scratch)),
        ]
        shutil.rmtree(scratch / "cold", ignore_errors=True)  # the last round's cold caches
        if round_ % 2:
            cold.reverse()
            warm_runs.reverse()
        runs.setdefault(("s3", "snapshot fetch cold s"), []).append(_timed(lambda: fetch(cold_cache())))
        for key, work in cold + warm_runs:
            timing = work()
            runs.setdefault(key, []).append(timing["total"][0])
            if "warm" in key[1]:
                phases[key[0]].append(timing)
    print("load average at the end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    figures["local"]["snapshot fetch cold s"] = 0.0
    for (kind, figure), seconds in runs.items():
        figures[kind][figure] = min(seconds)
        print(f"{kind} {figure}: " + ", ".join(f"{value:.3f}" for value in seconds))
    print("warm start by phase (least / median of each; CPU = this process's, all threads):")
    print(f"{'phase':<8}{'':>6}{'local wall':>12}{'s3 wall':>10}{'local CPU':>11}{'s3 CPU':>9}")
    for phase in (*PHASES, "total"):
        for name, pick in (("least", min), ("median", statistics.median)):
            cells = [pick(t[phase][i] for t in phases[kind]) for i in (0, 1) for kind in ("local", "s3")]
            print(f"{phase:<8}{name:>6}" + "".join(f"{c:>{w}.4f}" for c, w in zip(cells, (12, 10, 11, 9), strict=True)))
    for name, pick in (("least", min), ("median", statistics.median)):
        ratios = [
            pick(phases["s3"][i]["total"][k] / phases["local"][i]["total"][k] for i in range(args.repeat))
            for k in (0, 1)
        ]
        print(f"warm s3/local, the {name} of the rounds' ratios: wall {ratios[0]:.3f}x, CPU {ratios[1]:.3f}x")
    for kind, values in lookup_ms.items():
        print(
            f"warm lookup alone, {kind}, 200 times: least {values[0]:.3f} ms, median {statistics.median(values):.3f} ms"
        )


def _timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--frame-size", type=int, default=128)
    parser.add_argument("--snapshot-mb", type=int, default=256, help="train.pt and val.pt together")
    parser.add_argument("--repeat", type=int, default=3, help="training starts and fetches timed (the least kept)")
    parser.add_argument("--serve", type=int, default=200, help="frames read as the media view reads them")
    parser.add_argument("--start-only", action="store_true", help="training start only (no ingest, no serving)")
    args = parse_args(parser, frames=40, frame_size=32, snapshot_mb=1, serve=20, repeat=1)
    scratch = scratch_environment("object-store")
    import django

    django.setup()
    from django.core.files.storage import FileSystemStorage

    from common.filestore.publish import folder_publish
    from common.filestore.s3 import AppServedS3Storage
    from common.filestore.store import object_read
    from labeling.frame_files import frames_write
    from tests.object_store import bucket_delete, ensure_object_store, fresh_bucket, s3_env, s3_storage_config

    endpoint = ensure_object_store()
    env = s3_env(endpoint, fresh_bucket(endpoint))
    options = s3_storage_config(env)["OPTIONS"]
    storages = {"local": FileSystemStorage(location=scratch / "media"), "s3": AppServedS3Storage(**options)}
    frames = _frames(args.frames, args.frame_size)
    snapshot = scratch / "snapshot"
    snapshot.mkdir()
    _payloads(snapshot, args.snapshot_mb, args.frame_size)
    figures: dict[str, dict[str, float]] = {"local": {}, "s3": {}}
    try:
        for kind, storage in storages.items():
            row = figures[kind]
            if not args.start_only:
                row["ingest frames/s"] = len(frames) / _timed(lambda storage=storage: frames_write(storage, frames))
            if kind == "s3":
                row["snapshot publish s"] = _timed(
                    lambda storage=storage: folder_publish(storage, snapshot, "snapshots/bench")
                )
            else:
                row["snapshot publish s"] = 0.0
            served = [name for name, _ in frames[: args.serve]]

            def serve(storage=storage, served=served, kind=kind) -> None:
                for name in served:
                    if kind == "s3":  # webapp.views.media: one GET
                        assert object_read(storage, name, 1 << 20) is not None
                    elif storage.exists(name) and storage.size(name):
                        with storage.open(name, "rb") as handle:
                            handle.read()

            if not args.start_only:
                row["frame serving ms/frame"] = 1000 * _timed(serve) / len(served)
        _training_starts(figures, storages["s3"], snapshot, scratch, args)
    finally:
        bucket_delete(endpoint, env["S3_BUCKET"])
    print(f"frames {len(frames)} of {args.frame_size}x{args.frame_size} PNG, snapshot {args.snapshot_mb} MiB")
    print(f"{'figure':<26}{'local':>12}{'s3':>12}{'s3 cost':>9}")  # s3 cost: its time over local's
    for figure in figures["local"]:
        local, s3 = figures["local"][figure], figures["s3"][figure]
        cost = (local / s3 if figure.endswith("/s") else s3 / local) if local and s3 else None
        ratio = f"{cost:.2f}x" if cost is not None else "-"
        print(f"{figure:<26}{local:>12.4f}{s3:>12.4f}{ratio:>9}")
    print("targets: training start (time to the first step) cold within 2x of local, warm within 1.1x")


if __name__ == "__main__":
    main()
