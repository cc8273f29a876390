"""Same-host serving bench: frames through shared memory (reward_client transport "shm") against a memory copy.

The figure is the service's own bytes per second at moving a batch from an RL worker to the inference
worker and the rewards back, beside its limit measured in the same run: one `numpy.copyto` of the same
bytes in this process (the memory-copy limit). Target (issue 24): at batch >= 64, the same-host path
moves >= 0.5 of the memory copy's bytes per second. Beside it, for reference, the same batches through
HTTP (`.npy` bodies, transport "http").

The model answers at once (a scorer that reads one pixel per frame), so what is timed is the service:
the Procfile's web process (uvicorn, the rewards fast path, the descriptor's checks), Redis, and the real
inference worker loop (`inference.workers.loop.InferenceWorker`: queue, batching, the one `preadv` of the
frames), started here as a process of its own with that scorer in place of a model. Two client forms:
"in place" writes the frames into `RewardClient.frames_buffer` (as an RL worker that renders into it
would: nothing to copy), "copy in" hands `compute_rewards` a numpy batch (one copy into the segment).

Self-contained (an SQLite database in a temporary folder unless DATABASE_URL is set; REDIS_URL must
answer):

    .venv/bin/python bench/same_host.py [--batches 64,256,1024] [--size 128] [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))
from harness import interleaved, parse_args, scratch_environment, start_web, stop  # noqa: E402

DEPLOYMENT = "same-host-bench"


class InstantScorer:
    """Deterministic outputs at no cost: the first pixel's red value of each frame, over 255."""

    def score(self, batch: np.ndarray) -> list[float]:
        return (batch[:, 0, 0, 0] / 255.0).tolist()


def run_worker() -> None:
    """The inference worker loop with the instant scorer (this file run with --worker)."""
    from django.conf import settings

    from common.redis_clients import redis_from_url
    from inference.workers.loop import InferenceWorker

    worker = InferenceWorker(
        redis=redis_from_url(settings.REDIS_URL),
        load_model=lambda name: (1, InstantScorer()),
        report_health=lambda *args: None,
        list_deployments=lambda: [DEPLOYMENT],
        max_batch_pixels=settings.INFERENCE_BATCH_MAX_PIXELS,
    )
    worker.run()


def setup() -> str:
    """A project, a model row, the deployment and an RL worker's token; returns the token."""
    from django.core.management import call_command

    from inference.models import Deployment
    from inference.services import deployment_create
    from projects.models import Project
    from projects.services import agent_create
    from training.models import TrainedModel

    call_command("migrate", verbosity=0)
    Deployment.objects.filter(name=DEPLOYMENT).delete()
    project, _ = Project.objects.get_or_create(name="Same-host bench")
    model = TrainedModel.objects.create(project=project, kind="resnet", name="instant", checkpoint_path="-", config={})
    deployment_create(name=DEPLOYMENT, trained_model=model, max_batch_size=1024, max_wait_ms=0)
    return agent_create(name=f"same-host-{os.getpid()}", kind="rl_worker", all_projects=True)[1]


def gbps(nbytes: int, seconds: list[float]) -> float:
    return nbytes / statistics.median(seconds) / 1e9


def measure(shm, http, shape: tuple[int, ...], repeats: int) -> str:
    """One table row: the memory copy, then each transport interleaved with it (the same moments of the machine)."""
    frames = np.random.default_rng(shape[0]).integers(0, 256, size=shape, dtype=np.uint8)
    buffer = shm.frames_buffer(shape)
    buffer[:] = frames
    expected = (frames[:, 0, 0, 0] / 255.0).astype(np.float32)
    for client, sent in ((shm, buffer), (shm, frames), (http, frames)):  # warm, and check the answers
        np.testing.assert_allclose(client.compute_rewards(sent).probabilities, expected, atol=1e-6)
    target = np.empty_like(frames)
    np.copyto(target, frames)  # its pages are faulted in before anything is timed

    def copy(i: int) -> None:
        np.copyto(target, frames)

    copies: list[float] = []
    times = []
    for client, sent in ((shm, buffer), (shm, frames), (http, frames)):
        copy_t, service_t = interleaved(copy, lambda i, c=client, s=sent: c.compute_rewards(s), repeats=repeats)
        copies += copy_t
        times.append(service_t)
    limit = gbps(frames.nbytes, copies)
    figures = [gbps(frames.nbytes, t) for t in times]
    cells = " ".join(f"{f:>{w}.2f} {f / limit:>6.2f}" for f, w in zip(figures, (9, 8, 6), strict=True))
    ms = f"{statistics.median(copies) * 1e3:>9.2f} {statistics.median(times[0]) * 1e3:>11.2f}"
    return f"{shape[0]:>6} {frames.nbytes / 1e6:>7.2f} {limit:>7.2f} {cells} {ms}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="64,256,1024", help="comma-separated batch sizes")
    parser.add_argument("--size", type=int, default=128, help="image side in pixels")
    parser.add_argument("--repeats", type=int, default=20, help="timed requests per batch size and transport")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parse_args(parser, batches="4", size=32, repeats=2)
    import django

    if args.worker:  # started by the bench below: its settings are in the environment it inherited
        django.setup()
        return run_worker()
    scratch = scratch_environment("same-host")
    django.setup()
    from reward_client import RewardClient

    token = setup()
    web, url = start_web(scratch / "web.log")
    with open(scratch / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [sys.executable, __file__, "--worker"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        shm = RewardClient(url, token, DEPLOYMENT, transport="shm")
        http = RewardClient(url, token, DEPLOYMENT, transport="http")
        deadline = time.monotonic() + 120
        while True:  # until the worker's first heartbeat (GET /api/shm counts the workers on this machine)
            try:
                shm.frames_buffer((1, 1, 1, 3))
                break
            except Exception:
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise
                shm.transport_used = ""
                time.sleep(0.5)
        print(f"same-host path vs memory copy, {args.size}x{args.size} RGB, median of {args.repeats} (GB/s)")
        print(f"load average at start: {os.getloadavg()[0]:.2f}")
        print(
            f"{'batch':>6} {'MB':>7} {'memcpy':>7} {'in place':>9} {'ratio':>6} {'copy in':>8} {'ratio':>6} "
            f"{'HTTP':>6} {'ratio':>6} {'memcpy ms':>9} {'in place ms':>11}  target: in place >= 0.5 of memcpy"
        )
        for batch in [int(b) for b in args.batches.split(",")]:
            print(measure(shm, http, (batch, args.size, args.size, 3), args.repeats), flush=True)
        assert shm.transport_used == "shm", shm.shm_reason
        shm.close()
    finally:
        stop(worker, web)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
