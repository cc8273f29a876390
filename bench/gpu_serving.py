"""GPU serving benchmark: the whole service (uvicorn as the Procfile starts it, Redis, `manage.py inference_worker
--device cuda`) against the raw forward of the same checkpoint on the same GPU, in one call of a few minutes.

Model: RLinf's ResNet18 reward classifier (hidden_dim 256), random weights, one deployment per image size, each at
the size it was trained for (no resize), `max_batch_size 256`, the precision given (`--precision`, the deployment's
`inference_precision`). For each size (128x128 and 224x224) and batch (1, 64, 256) it prints, as measured:

  service   `.npy` bodies through `POST /api/deployments/<name>/rewards` over one keep-alive connection
            (bench/reward_http.py, a lean RL worker), round trip, median
  raw       the worker's own scorer in this process: host uint8 batch in, probabilities out (pinned staging and
            a non-blocking copy on CUDA, channels_last, the precision), median
  forward   the network alone on a batch already on the device (synchronised), median: what a GPU does
  ratio     service images/s over raw images/s (the issue's target: >= 0.5 at batch 256, 128x128, on a GPU)
  outside   (service - raw) per image: what the service itself costs beside the forward

Raw and service calls alternate, so both see the same moments of the machine. A time budget (`--budget-s`, 240 s
from the start by default) skips the rows it would overrun, and says so, so that a run ends within 5 minutes.

On a GPU machine without internet (the device image has PyTorch, torchvision, numpy, Pillow, requests): gather the
rest here once with `bench/gpu_serving_prepare.sh` (Python wheels into .whl/, a Redis server from Debian's packages
into .redis/), carry both, then (bench/README.md):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    python3 bench/gpu_serving.py --device cuda

Redis: REDIS_URL when it answers, else a `redis-server` (`--redis-server`, else .redis/usr/bin/redis-server, else
the PATH) started on a free port and stopped at the end. Database: an SQLite file in a scratch folder (harness).
Here, on the CPU, `--smoke` (the device defaults to the CPU where there is no GPU) runs every part in seconds; its
figures mean nothing.
"""

from __future__ import annotations

import argparse
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
import harness  # noqa: E402
from reward_http import LeanRewardClient  # noqa: E402

TMP = harness.scratch_environment("gpu-serving")
WORKER_ENV = harness.procfile_env("inference")
os.environ.update(WORKER_ENV)  # the raw forward runs as the worker does (OpenMP reads it when torch loads)
CARRIED_REDIS = ROOT / ".redis"  # what bench/gpu_serving_prepare.sh unpacks


def redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=2).ping())
    except (redis.RedisError, OSError):
        return False


def start_redis(binary: str | None, logs: Path) -> subprocess.Popen | None:
    """REDIS_URL when it answers (nothing started), else a redis-server on a free port, REDIS_URL pointed at it."""
    if os.environ.get("REDIS_URL") and redis_answers(os.environ["REDIS_URL"]):
        return None
    carried = CARRIED_REDIS / "usr" / "bin" / "redis-server"
    path = binary or (str(carried) if carried.exists() else shutil.which("redis-server"))
    if not path:
        sys.exit("no Redis: set REDIS_URL, pass --redis-server, or run bench/gpu_serving_prepare.sh and carry .redis")
    env = dict(os.environ)
    libs = CARRIED_REDIS / "usr" / "lib" / "x86_64-linux-gnu"
    if libs.exists():
        env["LD_LIBRARY_PATH"] = f"{libs}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}"
    port = harness.free_port()
    command = [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    command += ["--maxmemory", "4gb", "--maxmemory-policy", "noeviction", "--dir", str(TMP)]
    proc = subprocess.Popen(command, env=env, stdout=open(logs / "redis.log", "w"), stderr=subprocess.STDOUT)  # noqa: SIM115
    os.environ["REDIS_URL"] = url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 20
    while not redis_answers(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"{path} did not start: {(logs / 'redis.log').read_text()[-2000:]}")
        time.sleep(0.1)
    return proc


def setup(sizes: list[int], precision: str) -> tuple[dict[int, tuple[str, str]], str]:
    """Migrate; a checkpoint and a deployment per size; an RL worker's token. Returns {size: (deployment name,
    checkpoint folder)} and the token."""
    import django

    django.setup()
    import torch
    from django.core.files.storage import default_storage
    from django.core.management import call_command

    from inference.services import deployment_create
    from projects.models import Project
    from projects.services import agent_create
    from training.models import TrainedModel
    from training.resnet.checkpoint import save_checkpoint
    from training.resnet.config import ResNetConfig
    from training.resnet.model import RewardResNet

    call_command("migrate", verbosity=0)
    project, _ = Project.objects.get_or_create(name="bench-gpu-serving")
    served = {}
    for size in sizes:
        torch.manual_seed(size)
        config = ResNetConfig(arch="resnet18", image_size=[3, size, size], hidden_dim=256, dropout=0.1)
        folder = f"checkpoints/bench_{uuid.uuid4().hex[:8]}"
        save_checkpoint(RewardResNet(config).eval(), config, default_storage.path(folder), metrics={}, step=0)
        model = TrainedModel.objects.create(
            project=project, kind="resnet", name=f"bench-resnet18-{size}", checkpoint_path=folder
        )
        deployment = deployment_create(
            name=f"gpu-{size}-{uuid.uuid4().hex[:6]}",
            trained_model=model,
            reward_type="soft",  # the reward is the probability: the answer checks against the raw forward
            max_batch_size=256,
            max_wait_ms=0.0,  # one client: nothing to wait for
            inference_precision=precision,
        )
        served[size] = (deployment.name, default_storage.path(folder))
    _, token = agent_create(name=f"bench-gpu-{uuid.uuid4().hex[:6]}", kind="rl_worker", projects=[project])
    return served, token


class Raw:
    """The worker's scorer for one checkpoint in this process, and its network alone on a device batch."""

    def __init__(self, folder: str, device: str, precision: str):
        import torch

        from training.kit.family_parts import ModelSpec
        from training.resnet.scorer import ResNetScorer

        self.torch = torch
        self.scorer = ResNetScorer(ModelSpec(kind="resnet", folder=Path(folder), device=device, precision=precision))
        self.cuda = self.scorer.placement.device.type == "cuda"

    def score(self, batch: np.ndarray) -> list[float]:
        return self.scorer.score(batch)

    def forward_seconds(self, batch: np.ndarray, repeats: int) -> float:
        """Median seconds of the network alone on `batch` already on the device."""
        torch = self.torch
        on_device = self.scorer.staging.to_device(batch).clone()
        times = []
        with torch.inference_mode():
            for _ in range(repeats + 2):
                if self.cuda:
                    torch.cuda.synchronize()
                started = time.perf_counter()
                self.scorer.model(on_device)
                if self.cuda:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - started)
        return statistics.median(times[2:])


def measure_row(raw: Raw, client: LeanRewardClient, batch: np.ndarray, tolerance: float, repeats: int) -> str:
    """One row's figures: the served probabilities checked against raw, then raw and service interleaved."""
    from inference.broker import dump_npy

    body = dump_npy(batch)
    for _ in range(3):  # warm up: model loaded, connection open, cuDNN's algorithms picked
        rewards = client.rewards(body)
        expected = raw.score(batch)
    worst = float(np.abs(np.asarray(rewards) - np.asarray(expected)).max())
    assert worst <= tolerance, f"served probabilities differ from raw by {worst} (batch {batch.shape})"
    n = len(batch)
    repeats *= 3 if n == 1 else 1
    raw_times, service_times = harness.interleaved(
        lambda _: raw.score(batch), lambda _: client.rewards(body), repeats=repeats
    )
    raw_s, service_s = statistics.median(raw_times), statistics.median(service_times)
    forward_s = raw.forward_seconds(batch, repeats)
    return (
        f"{n / service_s:>14.1f} {n / raw_s:>11.1f} {raw_s / service_s:>6.2f} {n / forward_s:>14.1f} "
        f"{service_s * 1000:>11.2f} {raw_s * 1000:>9.2f} {(service_s - raw_s) / n * 1e6:>15.1f}"
    )


def device_line(device: str, precision: str) -> str:
    import torch

    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "CPU"
    return (
        f"GPU serving: ResNet18 (hidden 256), device {device} ({name}), precision {precision}, torch {torch.__version__}, "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--device", default="", help="cuda, cuda:N or cpu (the worker's --device; default: cuda if any)"
    )
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--sizes", default="128,224", help="image sides, comma-separated")
    parser.add_argument("--batches", default="1,64,256", help="batch sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per row and side (batch 1: 3x)")
    parser.add_argument("--budget-s", type=float, default=240.0, help="skip rows that would end past this")
    parser.add_argument("--redis-server", default=None, help="a redis-server binary (default: carried, then PATH)")
    args = harness.parse_args(parser, sizes="32", batches="1,4", repeats=2)
    started = time.monotonic()
    sizes = [int(s) for s in args.sizes.split(",")]
    batches = [int(b) for b in args.batches.split(",")]

    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"--device {args.device}: this machine's PyTorch sees no CUDA device (use --device cpu here)")
    logs = TMP / "logs"
    logs.mkdir()
    redis_proc = start_redis(args.redis_server, logs)
    served, token = setup(sizes, args.precision)

    env = dict(os.environ)
    server, url = harness.start_web(logs / "uvicorn.log", env)
    worker = harness.start_inference_worker(logs / "worker.log", env, "--device", args.device)
    try:
        harness.wait_for_inference_worker(worker)
        print(device_line(args.device, args.precision), flush=True)
        print(
            f"service: uvicorn (Procfile web) -> Redis -> manage.py inference_worker --device {args.device} "
            f"({' '.join(f'{k}={v}' for k, v in WORKER_ENV.items())}); one client, .npy bodies; "
            "raw: the worker's scorer in this process; forward: the network alone on a device batch",
            flush=True,
        )
        print(
            f"{'size':>4} {'batch':>5} {'service img/s':>14} {'raw img/s':>11} {'ratio':>6} {'forward img/s':>14} "
            f"{'service ms':>11} {'raw ms':>9} {'outside us/img':>15}",
            flush=True,
        )
        rng = np.random.default_rng(0)
        tolerance = 1e-4 if args.precision == "fp32" else 0.05
        for size in sizes:
            name, folder = served[size]
            raw = Raw(folder, args.device, args.precision)
            client = LeanRewardClient(url, token, name, timeout=120.0)
            for batch_size in batches:
                if time.monotonic() - started > args.budget_s:
                    print(f"{size:>4} {batch_size:>5} skipped: past the --budget-s of {args.budget_s:g} s", flush=True)
                    continue
                batch = rng.integers(0, 256, size=(batch_size, size, size, 3), dtype=np.uint8)
                print(
                    f"{size:>4} {batch_size:>5} " + measure_row(raw, client, batch, tolerance, args.repeats), flush=True
                )
            client.close()
        print(f"done in {time.monotonic() - started:.0f} s (target: under 300 s)", flush=True)
    finally:
        harness.stop(server, worker, *([redis_proc] if redis_proc else []))
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
