"""RL-run scale bench: one request per env at once, as RLinf's API reward worker sends them, must all get 200.

RLinf's reward worker posts one chat-completions request per env window at once (a thread pool as wide as
the batch, no token from a trusted address, no retries: any non-200 ends the run). This bench starts the
Procfile's `web` and `inference` processes as users run them (TRUSTED_CIDRS=127.0.0.1/32), deploys the tiny
Qwen3-VL fixture and a tiny ResNet, warms each with one request, then sends at once from --clients threads:

  1. RLinf's chat payload (two 5-frame JPEG videos of 32x32 px and its prompt, `max_tokens` 16) to
     `POST /v1/chat/completions`, tokenless;
  2. one single-image ResNet reward request each (`application/x-npy`, uint8 [1,32,32,3]) to
     `POST /api/deployments/<name>/rewards`, tokenless.

For each it prints the status counts (every answer must be 200) and the latency distribution
(p50/p95/p99/max), beside its limit measured in the same run: the time this process takes to score the
same number of items with the same model at the deployment's batch size (timed on up to 128 VLM windows
and scaled; the last answer cannot come sooner on one worker). Exit status 1 when any answer is not 200.

    .venv/bin/python bench/rl_scale.py               # 1,024 clients
    .venv/bin/python bench/rl_scale.py --smoke       # 64 clients, a quick check that it runs
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after ROOT: bench/inference.py must not hide the inference app
from harness import parse_args, procfile_line, scratch_environment, start_web, stop  # noqa: E402

SIZE = 32
FRAMES = 5
MODEL_ALIAS = "Qwen3-VL-4B-Instruct"  # RLinf names the model by its base model folder
PROMPT = (
    "You are currently performing the task: pick up the red cube. You are given two synchronized 5-frame videos "
    "from different camera views (main view and third-person view) of the same robot action window. Judge "
    "whether the action trend is positive, negative, or unclear. Answer with exactly one word: positive, "
    "negative, or unclear."
)
VLM_BATCH = 32
RESNET_BATCH = 64


def jpeg_data_url(frame: np.ndarray) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(frame, mode="RGB").save(buffer, format="JPEG", quality=95)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def window(seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8) for _ in range(FRAMES)] for _ in range(2)]


def chat_body(seed: int) -> dict:
    """RLinf's `_build_chat_payloads`: every frame of the main then the extra video, then the prompt."""
    content: list[dict] = [
        {"type": "image_url", "image_url": {"url": jpeg_data_url(f)}} for video in window(seed) for f in video
    ]
    content.append({"type": "text", "text": PROMPT})
    return {
        "model": MODEL_ALIAS,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 16,
        "temperature": 0,
    }


def npy_image(seed: int) -> bytes:
    from inference.broker import dump_npy

    return dump_npy(np.random.default_rng(seed).integers(0, 256, (1, SIZE, SIZE, 3), dtype=np.uint8))


def burst(post, bodies: list) -> tuple[Counter, list[float], list[str]]:
    """Send every body at once, one thread each (RLinf's pool as wide as the batch); the status counts,
    the latencies of the 200s (s) and the first few other answers."""
    import threading

    start = threading.Barrier(len(bodies))

    def one(body) -> tuple[int, float, str]:
        start.wait()
        began = time.perf_counter()
        try:
            response = post(body)
            return response.status_code, time.perf_counter() - began, response.text[:300]
        except Exception as exc:  # a refused or dropped connection counts as a failure, with its reason
            return 0, time.perf_counter() - began, f"{exc.__class__.__name__}: {exc}"

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        results = list(pool.map(one, bodies))
    statuses = Counter(status for status, _, _ in results)
    latencies = [t for status, t, _ in results if status == 200]
    errors = [f"{status}: {text}" for status, _, text in results if status != 200][:3]
    return statuses, latencies, errors


def distribution(latencies: list[float]) -> str:
    if not latencies:
        return "no 200 answers"
    p50, p95, p99 = np.percentile(latencies, [50, 95, 99])
    return f"p50 {p50:.2f} s  p95 {p95:.2f} s  p99 {p99:.2f} s  max {max(latencies):.2f} s"


def setup(media: Path):
    import django

    django.setup()
    import torch
    from django.core.files.storage import default_storage
    from django.core.management import call_command

    from inference.models import Deployment
    from inference.services import deployment_create
    from labeling.models import Project
    from training.models import TrainedModel
    from training.resnet.checkpoint import save_checkpoint
    from training.resnet.config import ResNetConfig
    from training.resnet.model import RewardResNet
    from training.vlm.fixture import build_tiny_qwen3_vl

    call_command("migrate", verbosity=0)
    Deployment.objects.filter(name__startswith="bench-rl-").delete()  # a run stopped early left its own
    project, _ = Project.objects.get_or_create(name="bench-rl-scale")
    tag = uuid.uuid4().hex[:8]
    vlm_folder = f"checkpoints/bench_rl_vlm_{tag}"
    build_tiny_qwen3_vl(default_storage.path(vlm_folder))
    vlm = TrainedModel.objects.create(
        project=project, kind="vlm", name="tiny-qwen3-vl", checkpoint_path=vlm_folder, config={"prompt": PROMPT}
    )
    torch.manual_seed(0)
    config = ResNetConfig(image_size=[3, SIZE, SIZE], hidden_dim=16, dropout=0.0)
    resnet_folder = f"checkpoints/bench_rl_resnet_{tag}"
    save_checkpoint(RewardResNet(config).eval(), config, default_storage.path(resnet_folder), metrics={}, step=1)
    resnet = TrainedModel.objects.create(
        project=project, kind="resnet", name="tiny-resnet", checkpoint_path=resnet_folder, config={}
    )
    vlm_deployment = deployment_create(
        name=f"bench-rl-vlm-{tag}",
        trained_model=vlm,
        aliases=[MODEL_ALIAS.lower()],
        max_batch_size=VLM_BATCH,
        max_wait_ms=20.0,
    )
    resnet_deployment = deployment_create(
        name=f"bench-rl-resnet-{tag}", trained_model=resnet, max_batch_size=RESNET_BATCH, max_wait_ms=5.0
    )
    return vlm_deployment, resnet_deployment


def raw_seconds(deployment, items: Any, batch: int, sample: int) -> float:
    """Seconds this process takes to score `items` with the deployment's model at `batch` (one torch thread,
    as the Procfile's worker), timed on the first `sample` of them and scaled to all: the least time the
    last of a burst's answers can take on one worker."""
    import torch
    from django.core.files.storage import default_storage

    from training.families import scorer_load
    from training.kit.family_parts import ModelSpec

    torch.set_num_threads(1)
    model = deployment.trained_model
    scorer: Any = scorer_load(
        ModelSpec(kind=model.kind, folder=default_storage.path(model.checkpoint_path), device="cpu")
    )
    score = scorer.score_windows if model.kind == "vlm" else scorer.score  # the chat path scores windows
    score(items[:batch])  # warm
    timed = items[: max(batch, min(sample, len(items)))]
    started = time.perf_counter()
    for i in range(0, len(timed), batch):
        score(timed[i : i + batch])
    return (time.perf_counter() - started) * len(items) / len(timed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1024, help="concurrent tokenless clients per burst")
    args = parse_args(parser, clients=64)
    clients = args.clients

    scratch = scratch_environment("rl_scale")
    os.environ["TRUSTED_CIDRS"] = "127.0.0.1/32"
    vlm_deployment, resnet_deployment = setup(scratch)

    import requests

    from training.vlm.wire import WindowRequest

    # what a chat request becomes: both videos' frames, RLinf's prompt, greedy generation of up to 16 tokens
    vlm_items = [
        WindowRequest([f for video in window(i) for f in video], PROMPT, generate=True, max_new_tokens=16)
        for i in range(clients)
    ]
    resnet_images = np.random.default_rng(0).integers(0, 256, (clients, SIZE, SIZE, 3), dtype=np.uint8)
    vlm_raw = raw_seconds(vlm_deployment, vlm_items, VLM_BATCH, sample=128)
    resnet_raw = raw_seconds(resnet_deployment, resnet_images, RESNET_BATCH, sample=clients)

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    worker = subprocess.Popen(
        ["bash", "-c", procfile_line("inference") + " --metrics-port 0"],  # bash execs its one command
        cwd=ROOT,
        env=env,
        stdout=open(scratch / "inference.log", "w"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.STDOUT,
    )
    web, base_url = start_web(scratch / "web.log")
    failed = False
    try:
        chat_bodies = [chat_body(i) for i in range(clients)]
        npy_bodies = [npy_image(i) for i in range(clients)]
        rewards_url = f"{base_url}/api/deployments/{resnet_deployment.name}/rewards"

        def chat(body):
            return requests.post(f"{base_url}/v1/chat/completions", json=body, timeout=(600, 600), proxies={})

        def reward(body):
            headers = {"Content-Type": "application/x-npy"}
            return requests.post(rewards_url, data=body, headers=headers, timeout=(600, 600), proxies={})

        for name, post, warm_body in (("chat", chat, chat_bodies[0]), ("rewards", reward, npy_bodies[0])):
            response = post(warm_body)  # the worker loads the model
            if response.status_code != 200:
                raise RuntimeError(f"warm-up {name} request answered {response.status_code}: {response.text[:300]}")

        print(f"RL-run scale bench: {clients} concurrent tokenless clients per burst, load average {os.getloadavg()}")
        for title, post, bodies, raw in (
            (f"RLinf chat, tiny Qwen3-VL ({VLM_BATCH}/batch)", chat, chat_bodies, vlm_raw),
            (f"ResNet rewards, 1 image ({RESNET_BATCH}/batch)", reward, npy_bodies, resnet_raw),
        ):
            started = time.perf_counter()
            statuses, latencies, errors = burst(post, bodies)
            wall = time.perf_counter() - started
            ok = statuses.get(200, 0) == clients
            failed |= not ok
            print(f"\n{title}: {dict(statuses)} ({'all 200' if ok else 'NOT ALL 200'}), burst {wall:.1f} s")
            print(f"  latency   {distribution(latencies)}")
            print(f"  limit     scoring the {clients} items in this process: {raw:.2f} s (the least max latency)")
            print(f"  max/limit {max(latencies, default=float('nan')) / raw:.1f}x")
            for error in errors:
                print(f"  error     {error}")
        print(f"\nload average after: {os.getloadavg()}")
    finally:
        stop(web, worker)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
