"""VLM trend benchmark on the tiny random-weight Qwen3-VL fixture (CPU).

Prints windows per second (5 frames x 2 views of 32x32 px per window) for:
  1. label scoring (softmax over the three label tokens, one forward pass) at batch 1 and batch 8,
     in this process: the limit;
  2. greedy generation (8 new tokens) at batch 1 and batch 8, in this process;
  3. the serving path: the real inference worker loop (Redis broker + dynamic batching + the `vlm`
     scorer) in a thread, with 1 stream and then 8 concurrent streams sending one window at a time;
     the gain from batching 8 concurrent streams over 1, beside the raw batch-8 / batch-1 ratio.

No Django: the worker loop and the broker are plain modules. Uses REDIS_URL (default db 15 of the local
Redis; only the benchmark's own keys are touched).

    .venv/bin/python bench/vlm.py [--threads 1] [--windows 48]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def windows(n: int, size: int = 32, seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(10)] for _ in range(n)]


def rate(fn, items: list, batch: int) -> float:
    """Windows per second of `fn(chunk)` over `items` in chunks of `batch` (after warm-up chunks).

    Runs in a fresh thread, as the worker loop below does, so both see the same torch threading."""

    def measure() -> float:
        for _ in range(3):
            fn(items[:batch])
        started = time.perf_counter()
        for start in range(0, len(items), batch):
            fn(items[start : start + batch])
        return len(items) / (time.perf_counter() - started)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(measure).result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 avoids OpenMP spin on a busy machine)")
    parser.add_argument("--windows", type=int, default=48, help="windows per measurement")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from inference.broker import AsyncBrokerClient, dump_npy, queue_key, redis_from_url
    from inference.worker import InferenceWorker
    from training.families import scorer_load
    from training.family_parts import ModelSpec
    from training.vlm.fixture import build_tiny_qwen3_vl
    from training.vlm.prompt import prompt_render
    from training.vlm.scoring import ScoreItem
    from training.vlm.wire import WindowRequest, pack_windows

    folder = build_tiny_qwen3_vl(Path(tempfile.mkdtemp(prefix="rs-bench-vlm-")) / "qwen3-vl-tiny")
    scorer = scorer_load(ModelSpec(kind="vlm", folder=folder, device="cpu"))
    prompt = prompt_render(None, task="Pick up the red cube.", window_size=5)
    data = windows(args.windows)
    items = [ScoreItem(w, prompt) for w in data]
    n = args.windows
    print(f"tiny Qwen3-VL fixture, {n} windows of 2 views x 5 frames x 32x32, torch threads {args.threads}")

    raw = {b: rate(scorer.scorer.probabilities, items, b) for b in (1, 8)}
    print(f"label scoring, in process:  batch 1 {raw[1]:7.1f} windows/s   batch 8 {raw[8]:7.1f} windows/s")
    gen_items = items[: max(8, n // 3)]
    gen = {b: rate(lambda c: scorer.scorer.generate(c, max_new_tokens=8), gen_items, b) for b in (1, 8)}
    print(f"generation (8 tokens):      batch 1 {gen[1]:7.1f} windows/s   batch 8 {gen[8]:7.1f} windows/s")

    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    redis = redis_from_url(url)
    name = f"bench-vlm-{os.getpid()}"
    redis.delete(queue_key(name))
    worker = InferenceWorker(
        redis,
        load_model=lambda _: (1, scorer),
        report_health=lambda *a: None,
        list_deployments=lambda: [name],
    )
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    payloads = [dump_npy(pack_windows([WindowRequest(w, prompt)])) for w in data]

    async def serve(streams: int) -> tuple[float, list[float]]:
        """`streams` clients at once, each sending its next window when the last is answered."""
        client = AsyncBrokerClient(redis_from_url(url, asyncio=True))
        queue = list(payloads)

        async def one(payload: bytes) -> float:
            started = time.perf_counter()
            (await client.submit(name, 1, payload, timeout=60, max_batch_size=8, max_wait_ms=5.0)).unwrap()
            return time.perf_counter() - started

        async def stream() -> list[float]:
            latencies = []
            while queue:
                latencies.append(await one(queue.pop()))
            return latencies

        try:
            await one(payloads[0])
            started = time.perf_counter()
            latencies = [t for ts in await asyncio.gather(*(stream() for _ in range(streams))) for t in ts]
            return n / (time.perf_counter() - started), latencies
        finally:
            await client.redis.aclose()

    def service(streams: int) -> tuple[float, list[float]]:
        return asyncio.run(serve(streams))

    try:
        single, lat1 = service(1)
        many, lat8 = service(8)
    finally:
        stop.set()
        thread.join(timeout=5)
        redis.delete(queue_key(name))
    raw_after = {b: rate(scorer.scorer.probabilities, items, b) for b in (1, 8)}
    print(f"label scoring, again after: batch 1 {raw_after[1]:7.1f} windows/s   batch 8 {raw_after[8]:7.1f} windows/s")
    raw = {b: max(raw[b], raw_after[b]) for b in raw}
    p50 = statistics.median
    print(f"service, 1 stream:          {single:7.1f} windows/s   median latency {p50(lat1) * 1000:6.1f} ms")
    print(f"service, 8 streams:         {many:7.1f} windows/s   median latency {p50(lat8) * 1000:6.1f} ms")
    print(
        f"gain from batching 8 concurrent streams over 1: {many / single:.2f}x "
        f"(raw batch 8 over batch 1 in process: {raw[8] / raw[1]:.2f}x; service 1 stream / raw batch 1: "
        f"{single / raw[1]:.2f})"
    )


if __name__ == "__main__":
    main()
