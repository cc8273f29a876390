"""VLM trend benchmark on the tiny random-weight Qwen3-VL fixture (CPU): the serving path beside its limit.

Prints windows per second (5 frames x 2 views of 32x32 px per window) for:
  1. the limit: label scoring (softmax over the three label tokens, one forward pass) of the deployed
     checkpoint in this process, at batch 1 and batch 8, with the worker's torch threads;
  2. greedy generation (8 new tokens) at batch 1 and batch 8, in this process (for reference);
  3. the service: `manage.py inference_worker` started exactly as the Procfile does (with the environment
     its `inference:` line sets), fed through the web side's `windows_infer` (packing, broker), with
     1 stream sending one window at a time, and 8 concurrent streams sending one window each, round after
     round. Raw and service calls alternate (one raw call, then one service call or round of 8), so both
     see the same state of a shared machine; each rate is the median call's. The mean batch size (windows
     per forward pass) the worker formed is printed beside it. Targets: 8 streams >= 0.8 of raw batch 8,
     1 stream >= 0.8 of raw batch 1. The whole comparison runs --repeats times; the median run counts.

Self-contained: it migrates the database named by DATABASE_URL (default: an SQLite file in a temporary
folder), writes the fixture under a temporary MEDIA_ROOT, deploys it and removes what it created.

    .venv/bin/python bench/vlm.py [--threads 1] [--windows 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after ROOT: bench/inference.py must not hide the inference app
from harness import interleaved, parse_args, procfile_env, scratch_environment, stop, wait_for_inference_worker  # noqa: E402

TMP = scratch_environment("vlm")
WORKER_ENV = procfile_env("inference")
os.environ.update(WORKER_ENV)  # as the Procfile runs the worker; the raw limit runs under it too (before torch loads)
TARGET = 0.8
MAX_WAIT_MS = 5.0


def windows(n: int, size: int = 32, seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(10)] for _ in range(n)]


def rate(fn, items: list, batch: int, warmup: int = 2) -> float:
    """Windows per second of `fn(chunk)` over `items` in chunks of `batch` (after warm-up chunks)."""
    for _ in range(warmup):
        fn(items[:batch])
    started = time.perf_counter()
    for start in range(0, len(items), batch):
        fn(items[start : start + batch])
    return len(items) / (time.perf_counter() - started)


def setup(folder_name: str):
    import django

    django.setup()
    from django.core.files.storage import default_storage
    from django.core.management import call_command

    from inference.services import deployment_create
    from projects.models import Project
    from training.models import TrainedModel
    from training.vlm.fixture import build_tiny_qwen3_vl

    call_command("migrate", verbosity=0)
    folder = build_tiny_qwen3_vl(default_storage.path(folder_name))
    project, _ = Project.objects.get_or_create(name="bench-vlm")
    model = TrainedModel.objects.create(project=project, kind="vlm", name="bench-vlm-tiny", checkpoint_path=folder_name)
    deployment = deployment_create(
        name=f"bench-vlm-{uuid.uuid4().hex[:8]}", trained_model=model, max_batch_size=8, max_wait_ms=MAX_WAIT_MS
    )
    return model, deployment, folder


def worker_counts(worker_id_prefix: str) -> tuple[int, int]:
    """Windows scored and batches run, from the bench worker's heartbeat (concurrent streams' windows may
    reach the worker as one request, so windows, not requests, tell the batch size)."""
    from django.conf import settings

    from common.redis_clients import redis_from_url
    from inference.broker import WORKERS_KEY

    beats = redis_from_url(settings.REDIS_URL).hgetall(WORKERS_KEY)
    mine = [json.loads(v) for k, v in beats.items() if k.decode().endswith(worker_id_prefix)]
    return sum(b.get("items", 0) for b in mine), sum(b.get("batches", 0) for b in mine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, raw and worker alike")
    parser.add_argument("--windows", type=int, default=200, help="windows per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the whole comparison; the median counts")
    args = parse_args(parser, windows=8, repeats=1)

    import torch

    torch.set_num_threads(args.threads)
    model, deployment, folder = setup(f"checkpoints/bench_vlm_{uuid.uuid4().hex[:8]}")

    from inference.serving import deployment_config
    from inference.vlm.serving import windows_infer
    from training.families import scorer_load
    from training.kit.family_parts import ModelSpec
    from training.vlm.prompt import prompt_render
    from training.vlm.scoring import ScoreItem
    from training.vlm.wire import WindowRequest

    scorer = scorer_load(ModelSpec(kind="vlm", folder=folder, device="cpu"))
    prompt = prompt_render(None, task="Pick up the red cube.", window_size=5)
    data = windows(args.windows)
    items = [ScoreItem(w, prompt) for w in data]
    requests = [WindowRequest(w, prompt) for w in data]
    n = args.windows

    env = {**os.environ, **WORKER_ENV}
    logs = TMP / "worker.log"
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "inference_worker", "--threads", str(args.threads)]
        + ["--deployments", deployment.name, "--metrics-port", "0"],
        cwd=ROOT,
        env=env,
        stdout=open(logs, "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    suffix = f":{worker.pid}"
    try:
        wait_for_inference_worker(worker)
        config = asyncio.run(deployment_config(deployment.name))

        loop = asyncio.new_event_loop()  # one loop for every service call, as a web process has

        def service_call(batch: list[WindowRequest]) -> None:
            """`len(batch)` streams sending one window each at the same moment."""

            async def together() -> None:
                await asyncio.gather(*(windows_infer(config, [r], timeout=120) for r in batch))

            loop.run_until_complete(together())

        def compare(streams: int) -> tuple[float, float, float, float]:
            """(service windows/s, raw windows/s, mean batch, median service latency) from alternating calls."""

            def raw_step(i: int) -> None:
                scorer.scorer.probabilities(items[i * streams : (i + 1) * streams])

            def service_step(i: int) -> None:
                service_call(requests[i * streams : (i + 1) * streams])

            interleaved(raw_step, service_step, repeats=2)  # warm-up: both paths once more
            time.sleep(1.2)  # a heartbeat carrying the warm-up's counts, so that they are not counted below
            served0, batches0 = worker_counts(suffix)
            raw_times, service_times = interleaved(raw_step, service_step, repeats=n // streams)
            time.sleep(1.2)  # the heartbeat carrying the counts is written at most a second apart
            served1, batches1 = worker_counts(suffix)
            mean_batch = (served1 - served0) / max(1, batches1 - batches0)
            service_median = statistics.median(service_times)
            return streams / service_median, streams / statistics.median(raw_times), mean_batch, service_median

        service_call(requests[:1])  # the worker loads the model on its first request
        gen_items = items[: max(8, n // 3)]
        gen = {b: rate(lambda c: scorer.scorer.generate(c, max_new_tokens=8), gen_items, b) for b in (1, 8)}
        print(
            f"tiny Qwen3-VL fixture, {n} windows of 2 views x 5 frames x 32x32, torch threads {args.threads} "
            f"(raw in-process and worker), max_batch_size 8, max_wait_ms {MAX_WAIT_MS:g}, "
            f"worker and raw {' '.join(f'{k}={v}' for k, v in WORKER_ENV.items())} (Procfile), load average {os.getloadavg()[0]:.1f}"
        )
        print(f"generation (8 tokens), in process: batch 1 {gen[1]:7.1f} windows/s   batch 8 {gen[8]:7.1f} windows/s")
        print(f"{'scenario (windows/s)':<34} {'service':>9} {'raw limit':>10} {'ratio':>7} {'batch':>6}  target")
        results: dict[int, list[tuple[float, float, float, float]]] = {1: [], 8: []}
        for round_ in range(args.repeats):
            for streams in (1, 8):
                tput, limit, mean_batch, latency = compare(streams)
                results[streams].append((tput, limit, mean_batch, latency))
                print(
                    f"{f'{streams} stream(s) vs raw batch {streams}, run {round_ + 1}':<34} {tput:>9.1f} {limit:>10.1f} "
                    f"{tput / limit:>7.2f} {mean_batch:>6.1f}  >= {TARGET} "
                    f"(median latency {latency * 1000:.1f} ms)"
                )
        loop.close()
        print(f"load average {os.getloadavg()[0]:.1f}")
        for streams, runs in results.items():
            tput, limit, mean_batch, _ = sorted(runs, key=lambda r: r[0] / r[1])[(len(runs) - 1) // 2]
            ratio = tput / limit
            print(
                f"median run, {streams} stream(s): {tput:.1f} windows/s vs raw batch {streams} {limit:.1f} -> ratio "
                f"{ratio:.2f} (target >= {TARGET}) {'OK' if ratio >= TARGET else 'BELOW TARGET'}"
            )
    except Exception:
        print(f"worker log (tail):\n{logs.read_text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        stop(worker)
        deployment.delete()
        model.delete()
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
