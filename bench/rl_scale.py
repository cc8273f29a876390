"""RL-run scale bench: RLinf's VLM chat requests and single-image ResNet requests from N envs each, BOTH AT ONCE,
against a service that has loaded no model yet; every answer must be 200 and the slowest under half of the
service's INFERENCE_TIMEOUT_S.

The service is started as users run it: the Procfile's `web` and `inference` processes, TRUSTED_CIDRS=127.0.0.1/32
(no tokens), the tiny Qwen3-VL fixture (32 windows a batch) and a tiny ResNet (64 images a batch) deployed. Cold:
the inference worker has sent its first heartbeat and loaded nothing; no request warms either model. Then at
the same moment:

  1. chat: N requests from RLinf's own code in the interop environment (tests/interop/side_rlinf_mirrors.py
     `chat_burst`): RLinf 0.3.0's `qwentrend_input_builder` turns each env's window (two 5-frame 32x32 videos)
     into its videos and its prompt text; 0.3.0's `InferenceHTTPClient.chat_completion` sends it. RLinf 0.3.0 has
     no API reward worker (it is at its repository head only), so the body is assembled as head's
     `_build_chat_payloads` does, byte for byte: every frame of the main then the extra video as a JPEG (quality
     95) data URL, the prompt as the last text part, `model` = the base model folder's name, `max_tokens` 16 and
     `temperature` 0 spread in; one thread per window (head's `_generate`), no retries;
  2. rewards: N single-image `.npy` requests (uint8 [1,32,32,3]) to `POST /api/deployments/<name>/rewards`,
     tokenless, one thread each, no retries.

For each kind it prints every answer's status (counted), the slowest answer and p50/p90/p99 beside the limit
(half of INFERENCE_TIMEOUT_S, as this service reads it), when the first 200 came (the model's load on demand is in
it), and, to say where the time went, the in-process limit: the time this process takes to score the same items
with the same model at the deployment's batch size on one torch thread (VLM timed on up to 128 windows and
scaled), which is the least time the last answer can take on one worker; and the worker's batches. Exit status 1
when any answer is not 200 or the slowest is not under the limit.

    .venv/bin/python bench/rl_scale.py               # 1,024 envs: 1,024 chat + 1,024 ResNet requests at once
    .venv/bin/python bench/rl_scale.py --smoke       # 64 of each, a quick check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
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
from harness import (  # noqa: E402
    cpu_seconds,
    parse_args,
    procfile_line,
    scratch_environment,
    start_web,
    stop,
    wait_for_inference_worker,
)

SIZE = 32
FRAMES = 5
TASK = "pick up the red cube"
MODEL_ALIAS = "Qwen3-VL-4B-Instruct"  # RLinf names the model by its base model folder (`_derive_model_name`)
SAMPLING = {"max_tokens": 16, "temperature": 0}  # `reward.api.sampling_params` of RLinf's example config
PROMPT = (  # what the tiny model was "trained" with: RLinf's qwentrend prompt for TASK
    f"You are currently performing the task: {TASK}. You are given two synchronized 5-frame videos "
    "from different camera views (main view and third-person view) of the same robot action window. Judge "
    "whether the action trend is positive, negative, or unclear. Answer with exactly one word: positive, "
    "negative, or unclear."
)
VLM_BATCH = 32
RESNET_BATCH = 64
SIDE_PYTHON = ROOT / ".interop" / "bin" / "python"
SIDE_RUNNER = ROOT / "tests" / "interop" / "side_rlinf_mirrors.py"


def windows(clients: int) -> np.ndarray:
    """Each env's window: [clients, 2 views, FRAMES, SIZE, SIZE, 3] uint8."""
    return np.random.default_rng(0).integers(0, 256, (clients, 2, FRAMES, SIZE, SIZE, 3), dtype=np.uint8)


def npy_image(seed: int) -> bytes:
    from inference.broker import dump_npy

    return dump_npy(np.random.default_rng(seed).integers(0, 256, (1, SIZE, SIZE, 3), dtype=np.uint8))


def side_chat_burst(args: dict, folder: Path) -> subprocess.Popen:
    """RLinf's chat clients in the interop environment (`chat_burst`), started now, sending when `go_file`
    appears; its arguments and its stderr in `folder`."""
    if not SIDE_PYTHON.is_file():
        raise SystemExit(
            f"{SIDE_PYTHON} is missing: the chat clients are RLinf 0.3.0's own code in the interop environment; "
            "build it with `source scripts/lib.sh; ensure_interop_env` (scripts/test.sh does)"
        )
    (folder / "chat_args.json").write_text(json.dumps(args))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [str(SIDE_PYTHON), str(SIDE_RUNNER), "chat_burst"],
        stdin=open(folder / "chat_args.json"),  # noqa: SIM115 - closed with the process
        stdout=subprocess.PIPE,
        stderr=open(folder / "chat_clients.log", "w"),  # noqa: SIM115 - closed with the process
        text=True,
        cwd="/",  # nothing of the project on its path
        env=env,
    )


def rewards_burst(url: str, bodies: list[bytes], gate: threading.Barrier) -> list[list]:
    """One thread per body, all released by `gate`; per request [status (0: no answer), seconds, text]."""
    import requests

    def one(body: bytes) -> list:
        gate.wait()
        started = time.perf_counter()
        try:
            response = requests.post(
                url, data=body, headers={"Content-Type": "application/x-npy"}, timeout=(600, 600), proxies={}
            )
            return [response.status_code, time.perf_counter() - started, response.text[:300]]
        except Exception as exc:  # a refused or dropped connection counts as a failure, with its reason
            return [0, time.perf_counter() - started, f"{exc.__class__.__name__}: {exc}"[:300]]

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(one, bodies))


def report(title: str, results: list[list], limit_s: float, raw_s: float) -> bool:
    """Print one kind's figures; whether it passed (every answer 200, the slowest under `limit_s`)."""
    statuses = Counter(int(status) for status, _, _ in results)
    seconds = np.array([t for _, t, _ in results])
    ok_seconds = np.array([t for status, t, _ in results if status == 200])
    all_200 = statuses.get(200, 0) == len(results)
    slowest = float(seconds.max())
    within = slowest < limit_s
    print(f"\n{title}: statuses {dict(sorted(statuses.items()))} ({'all 200' if all_200 else 'NOT ALL 200'})")
    p50, p90, p99 = np.percentile(seconds, [50, 90, 99])
    print(f"  latency   p50 {p50:.2f} s  p90 {p90:.2f} s  p99 {p99:.2f} s  slowest {slowest:.2f} s (every answer)")
    verdict = "within" if within else "NOT within"
    print(
        f"  limit     slowest {slowest:.2f} s vs half the timeout {limit_s:.1f} s: {verdict} ({slowest / limit_s:.2f}x)"
    )
    if len(ok_seconds):
        print(f"  first 200 after {ok_seconds.min():.2f} s (the model loaded on demand meanwhile)")
    print(
        f"  in-process scoring of the {len(results)} items on one thread: {raw_s:.2f} s (slowest/that {slowest / raw_s:.1f}x)"
    )
    for status, _, text in [r for r in results if r[0] != 200][:3]:
        print(f"  error     {status}: {text}")
    return all_200 and within


def setup():
    import django

    django.setup()
    import torch
    from django.core.files.storage import default_storage
    from django.core.management import call_command

    from inference.models import Deployment
    from inference.services import deployment_create
    from projects.models import Project
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
        ModelSpec(kind=model.kind, folder=Path(default_storage.path(model.checkpoint_path)), device="cpu")
    )
    score = scorer.score_windows if model.kind == "vlm" else scorer.score  # the chat path scores windows
    score(items[:batch])  # warm
    timed = items[: max(batch, min(sample, len(items)))]
    started = time.perf_counter()
    for i in range(0, len(timed), batch):
        score(timed[i : i + batch])
    return (time.perf_counter() - started) * len(items) / len(timed)


def worker_counts() -> tuple[int, int]:
    """(items, batches) the inference workers have scored, from their heartbeats."""
    from django.conf import settings

    from common.redis_clients import redis_from_url
    from inference.broker import WORKERS_KEY

    beats = redis_from_url(settings.REDIS_URL).hgetall(WORKERS_KEY)
    items = sum(json.loads(v).get("items", 0) for v in beats.values())
    batches = sum(json.loads(v).get("batches", 0) for v in beats.values())
    return items, batches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1024, help="envs: chat requests and ResNet requests each")
    args = parse_args(parser, clients=64)
    clients = args.clients

    scratch = scratch_environment("rl_scale")
    os.environ["TRUSTED_CIDRS"] = "127.0.0.1/32"
    vlm_deployment, resnet_deployment = setup()
    from django.conf import settings

    from training.vlm.wire import WindowRequest

    timeout_s = float(settings.INFERENCE_TIMEOUT_S)
    limit_s = timeout_s / 2
    frames = windows(clients)
    np.save(scratch / "windows.npy", frames)
    # what a chat request becomes: both videos' frames, the prompt, greedy generation of up to 16 tokens
    vlm_items = [WindowRequest([*window[0], *window[1]], PROMPT, generate=True, max_new_tokens=16) for window in frames]
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
    side = None
    passed = False
    try:
        wait_for_inference_worker(worker)  # started, heartbeat sent, no model loaded: cold
        signals = Path(tempfile.mkdtemp(prefix="rl-scale-go-"))
        side = side_chat_burst(
            {
                "base_url": base_url,
                "frames": str(scratch / "windows.npy"),
                "task": TASK,
                "model": MODEL_ALIAS,
                "sampling_params": SAMPLING,
                "ready_file": str(signals / "ready"),
                "go_file": str(signals / "go"),
            },
            scratch,
        )
        deadline = time.monotonic() + 600
        while not (signals / "ready").exists():  # RLinf's builder has made every body
            if side.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"RLinf's chat clients did not get ready:\n{(scratch / 'chat_clients.log').read_text()[-3000:]}"
                )
            time.sleep(0.05)
        bodies = [npy_image(i) for i in range(clients)]
        gate = threading.Barrier(clients + 1)
        rewards_url = f"{base_url}/api/deployments/{resnet_deployment.name}/rewards"
        resnet_results: list[list] = []
        sender = threading.Thread(target=lambda: resnet_results.extend(rewards_burst(rewards_url, bodies, gate)))
        sender.start()
        items_before, batches_before = worker_counts()
        load = os.getloadavg()
        pids = [web.pid, worker.pid, side.pid, os.getpid()]
        cpu_before = cpu_seconds(pids)
        began = time.time()
        (signals / "go").write_text("go")
        gate.wait()
        assert side.stdout is not None
        out = side.stdout.read()  # until it exits; not reaped yet, so its CPU times can still be read
        side_cpu = cpu_seconds([side.pid])[0]
        side.wait()
        sender.join()
        wall = time.time() - began
        cpu = [
            after - before
            for after, before in zip(
                [*cpu_seconds(pids[:2]), side_cpu, *cpu_seconds(pids[3:])], cpu_before, strict=True
            )
        ]
        if side.returncode != 0:
            raise RuntimeError(
                f"RLinf's chat clients failed ({side.returncode}):\n{(scratch / 'chat_clients.log').read_text()[-3000:]}"
            )
        chat = json.loads(out.strip().splitlines()[-1])
        time.sleep(1.2)  # a fresh heartbeat carries the worker's counters
        items_after, batches_after = worker_counts()

        print(
            f"RL-run scale bench: {clients} envs, {clients} RLinf chat + {clients} ResNet requests at once, cold "
            f"(no model loaded); INFERENCE_TIMEOUT_S {timeout_s:g} s; load average before {load}"
        )
        print(f"RLinf 0.3.0's prompt is the trained one: {chat['prompt'] == PROMPT}; both bursts done in {wall:.1f} s")
        passed = report(f"RLinf chat, tiny Qwen3-VL ({VLM_BATCH}/batch)", chat["results"], limit_s, vlm_raw)
        passed &= report(f"ResNet rewards, 1 image ({RESNET_BATCH}/batch)", resnet_results, limit_s, resnet_raw)
        items, batches = items_after - items_before, batches_after - batches_before
        print(f"\nworker: {items} items in {batches} batches ({items / max(batches, 1):.1f} a batch)")
        print(
            f"CPU seconds while the bursts ran ({wall:.1f} s wall, {os.cpu_count()} cores): web {cpu[0]:.1f}, "
            f"inference worker {cpu[1]:.1f}, RLinf's chat clients {cpu[2]:.1f}, "
            f"ResNet clients {cpu[3]:.1f}"
        )
        print(f"load average after: {os.getloadavg()}")
    finally:
        if side is not None and side.poll() is None:
            side.kill()
        stop(web, worker)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
