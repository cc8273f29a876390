"""Live teleop benchmark: replay agent -> server -> inference worker -> 5 dashboard clients.

For each stream rate it prints, at every dashboard client, the latency from frame sent (the agent's
`sent_at`) to probability received (p50, p95), beside the raw single-image forward time of the same
checkpoint measured in this process with the same torch threads as the worker, in the same run, one forward per
frame period (an idle CPU between frames is slower to start a forward). Each
scenario also splits client 1's latency into the server's own scoring round trip (the result's
`inference_ms`: reward path, broker, worker, forward) and the rest (agent to server, image checks and
decode, waiting in the newest-frame slot, the fan-out to viewers); the agent's line, beside the clients',
shows what the viewers' channel-layer fan-out adds to the agent's direct reply.

  1. 10 Hz, ResNet18 128x128: target p95 <= the raw forward's p95 + 20 ms at every client (the forward's own
     tail is the model's, not the service's: the raw forward's p50 and p95 are printed).
  2. 20 Hz, same model.
  3. overload: a ResNet18 at 224x224 (RLinf's PickCube size, slower) streamed at twice the rate it can
     serve (2 / raw forward): the inference backlog must stay bounded (newest frame wins, at most one
     waiting), drops are reported, and latency must not grow over the run (first vs second half).

Self-contained like bench/inference.py: migrates the database named by DATABASE_URL (default: an SQLite
file in a temporary folder), writes checkpoints to a temporary MEDIA_ROOT, starts uvicorn and
`manage.py inference_worker --threads N` on a free port:

    .venv/bin/python bench/teleop.py [--threads 1] [--seconds 10] [--clients 5]

The worker runs with the environment the Procfile's `inference:` line sets (its OpenMP settings),
and the raw forward in this process under the same settings (applied before torch loads).

Give it a database and Redis db of its own (the default SQLite file does that for the database): another
inference worker watching the same deployments would take its requests without its checkpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after ROOT: bench/inference.py must not hide the inference app
from harness import parse_args, procfile_env, scratch_environment, start_web, stop, wait_for_inference_worker  # noqa: E402

TMP = scratch_environment("teleop")
WORKER_ENV = procfile_env("inference")
os.environ.update(WORKER_ENV)  # the raw forward runs as the worker does (OpenMP reads it when torch loads)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def setup():
    import django

    django.setup()
    import torch
    from django.contrib.auth import get_user_model
    from django.core.files.storage import default_storage
    from django.core.management import call_command
    from django.test import Client

    from inference.services import deployment_create
    from projects.models import AgentScope, Membership, Project
    from projects.services import agent_create
    from training.models import TrainedModel
    from training.resnet.checkpoint import save_checkpoint
    from training.resnet.config import ResNetConfig
    from training.resnet.model import RewardResNet

    call_command("migrate", verbosity=0)
    project, _ = Project.objects.get_or_create(name="bench-teleop", defaults={"camera_views": ["main", "extra"]})
    deployments = {}
    for size in (128, 224):
        torch.manual_seed(0)
        config = ResNetConfig(arch="resnet18", image_size=[3, size, size], hidden_dim=256, dropout=0.1)
        folder = f"checkpoints/bench_teleop_{size}_{uuid.uuid4().hex[:6]}"
        save_checkpoint(RewardResNet(config).eval(), config, default_storage.path(folder), metrics={}, step=0)
        model = TrainedModel.objects.create(
            project=project, kind="resnet", name=f"bench-{size}", checkpoint_path=folder
        )
        deployment = deployment_create(name=f"bench-teleop-{size}-{uuid.uuid4().hex[:6]}", trained_model=model)
        deployments[size] = (deployment.name, default_storage.path(folder))
    # a robot's token streams teleop to this project and may score its frames (the rewards scope: without it
    # the session records unscored); the viewer is a member of the project
    scopes = [AgentScope.INGEST, AgentScope.TELEOP, AgentScope.REWARDS]
    _, token = agent_create(
        name=f"bench-teleop-{uuid.uuid4().hex[:6]}", kind="robot", scopes=scopes, projects=[project]
    )
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:6]}", password="x-bench-pw-1")
    Membership.objects.create(project=project, user=user, role=Membership.Role.ANNOTATOR)
    client = Client()
    client.force_login(user)
    return project, deployments, token, client.cookies["sessionid"].value


def raw_forward_ms(folder: str, size: int, hz: float | None, repeats: int = 40) -> tuple[float, float]:
    """The raw single-image forward's p50 and p95 in ms, one call every 1/hz s as the stream sends frames (an idle
    CPU between frames makes a forward slower than back to back): the stream's p95 is compared with the
    forward's own at the same pace. `hz=None`: back to back."""
    import numpy as np

    from training.resnet.checkpoint import load_checkpoint, predict_proba

    model, _ = load_checkpoint(folder, "cpu")
    image = np.random.default_rng(0).integers(0, 256, size=(1, size, size, 3), dtype=np.uint8)
    for _ in range(3):
        predict_proba(model, image)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        predict_proba(model, image)
        times.append((time.perf_counter() - started) * 1000)
        if hz is not None:
            time.sleep(max(0.0, 1 / hz - (time.perf_counter() - started)))
    return statistics.median(times), percentile(times, 0.95)


async def dashboard(url: str, cookie: str, origin: str, stop: asyncio.Event, out: dict) -> None:
    from websockets.asyncio.client import connect

    async with connect(url, additional_headers={"Cookie": f"sessionid={cookie}"}, origin=origin, max_size=None) as ws:
        out["connected"] = True
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.2)
            except TimeoutError:
                continue
            message = json.loads(raw)
            if message["type"] == "result" and message.get("sent_at"):
                out["latencies"].append((time.time() - message["sent_at"]) * 1000)
                out["scoring"].append(message["inference_ms"])
                out["dropped"] = message.get("dropped", 0)
            elif message["type"] == "frame":
                out["frames"] += 1


async def scenario(base: str, token: str, cookie: str, deployment: str, size: int, hz: float, seconds: float, n: int):
    from robot_agent.policies import ReplayPolicy
    from robot_agent.replay_robot import ReplayRobot, synthetic_episode
    from robot_agent.runner import RunConfig, run_episodes
    from robot_agent.streamer import Streamer

    steps = int(hz * seconds)
    robot = ReplayRobot(synthetic_episode(steps + 1, size=size), env_id="bench")
    hello = {"project": "bench-teleop", "deployment": deployment, "cameras": robot.cameras, "hz": hz}
    streamer = Streamer(base, token, hello).start()
    ws_base = base.replace("http://", "ws://")
    stop = asyncio.Event()
    outs = [{"latencies": [], "scoring": [], "frames": 0, "dropped": 0} for _ in range(n)]
    tasks = [
        asyncio.create_task(dashboard(f"{ws_base}/ws/teleop/sessions/{streamer.session_id}/", cookie, base, stop, o))
        for o in outs
    ]
    while not all(o.get("connected") for o in outs):
        await asyncio.sleep(0.05)
    config = RunConfig(hz=hz, episodes=1, max_steps=steps, quiet=True)
    started = time.monotonic()
    with robot:
        summary = await asyncio.to_thread(run_episodes, robot, ReplayPolicy(robot), streamer, config)
    elapsed = time.monotonic() - started
    await asyncio.sleep(1.5)  # the last results arrive
    await asyncio.to_thread(streamer.close)
    stop.set()
    await asyncio.gather(*tasks)
    return summary, elapsed, outs, streamer.stats


def report(
    title: str, raw: tuple[float, float], summary, elapsed: float, outs: list[dict], limit_ms, stats=None
) -> None:
    sent, (raw_ms, raw_p95) = summary.steps, raw
    print(
        f"\n{title}: {sent} steps sent in {elapsed:.1f} s ({sent / elapsed:.1f} Hz); raw forward (at that pace) p50 "
        f"{raw_ms:.1f} ms, p95 {raw_p95:.1f} ms; load average {os.getloadavg()[0]:.1f}"
    )
    worst = 0.0
    for i, out in enumerate(outs, 1):
        lat = out["latencies"]
        p50, p95 = percentile(lat, 0.5), percentile(lat, 0.95)
        worst = max(worst, p95)
        print(
            f"  client {i}: frames {out['frames']:4d}  probabilities {len(lat):4d}  "
            f"latency p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  (raw forward {raw_ms:.1f} ms)"
        )
    if stats is not None and stats.latencies_ms:
        own = stats.latencies_ms
        print(
            f"  agent:    results {len(own):4d}  latency p50 {percentile(own, 0.5):7.1f} ms  p95 {percentile(own, 0.95):7.1f} ms"
        )
    scoring = outs[0]["scoring"]
    if scoring:  # where the time goes: the server's own scoring round trip, and the rest of the path
        rest = [total - own for total, own in zip(outs[0]["latencies"], scoring, strict=True)]
        print(
            f"  split at client 1: the server's scoring (reward path, broker, worker) p50 "
            f"{percentile(scoring, 0.5):7.1f} ms, p95 {percentile(scoring, 0.95):7.1f} ms; the rest (agent to "
            f"server, checks, decode, fan-out) p50 {percentile(rest, 0.5):7.1f} ms, p95 {percentile(rest, 0.95):7.1f} ms"
        )
    dropped = max(o["dropped"] for o in outs)
    print(f"  dropped frames (reported by the server): {dropped}")
    if any(not out["latencies"] for out in outs):
        print("  NO RESULTS at some client: the frames were not scored (see the server's log)")
    elif limit_ms is not None:
        verdict = "OK" if worst <= limit_ms else "OVER"
        print(
            f"  worst p95 {worst:.1f} ms vs limit raw p95 + 20 ms = {limit_ms:.1f} ms: ratio {worst / limit_ms:.2f} "
            f"[{verdict}]"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for raw and worker")
    parser.add_argument("--seconds", type=float, default=10.0, help="stream length per scenario")
    parser.add_argument("--clients", type=int, default=5)
    args = parse_args(parser, seconds=1.5, clients=2)

    import torch

    torch.set_num_threads(args.threads)
    _, deployments, token, cookie = setup()
    env = dict(os.environ)
    (TMP / "logs").mkdir()
    server, base = start_web(TMP / "logs" / "uvicorn.log", env)
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "inference_worker", "--threads", str(args.threads)],
        cwd=ROOT, env={**env, **WORKER_ENV}, stdout=open(TMP / "logs" / "worker.log", "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
    )  # fmt: skip
    try:
        wait_for_inference_worker(worker)
        name128, folder128 = deployments[128]
        name224, folder224 = deployments[224]
        print(
            f"teleop bench: {args.clients} dashboard clients, torch threads {args.threads}, CPU, worker and raw "
            f"{' '.join(f'{k}={v}' for k, v in WORKER_ENV.items())} (Procfile), "
            f"load average {os.getloadavg()[0]:.1f}; logs in {TMP}"
        )
        # warm-up: models loaded in the worker, connections open
        asyncio.run(scenario(base, token, cookie, name128, 128, 10, 1.5, 1))
        asyncio.run(scenario(base, token, cookie, name224, 224, 10, 1.5, 1))
        for hz in (10, 20):
            raw = raw_forward_ms(folder128, 128, hz, repeats=max(10, min(40, round(args.seconds * hz))))
            result = asyncio.run(scenario(base, token, cookie, name128, 128, hz, args.seconds, args.clients))
            report(f"{hz} Hz, ResNet18 128x128", raw, *result[:3], raw[1] + 20 if hz == 10 else None, result[3])
        raw224 = raw_forward_ms(folder224, 224, None, repeats=20)  # back to back, as the overload keeps it busy
        serve_hz = 1000 / raw224[0]
        overload_hz = min(2 * serve_hz, 60.0)
        summary, elapsed, outs, stats = asyncio.run(
            scenario(base, token, cookie, name224, 224, overload_hz, args.seconds, args.clients)
        )
        report(f"overload {overload_hz:.1f} Hz (2x the {serve_hz:.1f} Hz a 224x224 ResNet18 serves)", raw224,
               summary, elapsed, outs, None, stats)  # fmt: skip
        lat = outs[0]["latencies"]
        half = len(lat) // 2
        first, second = percentile(lat[:half], 0.95), percentile(lat[half:], 0.95)
        scored = len(lat)
        dropped = max(o["dropped"] for o in outs)
        print(
            f"  scored {scored} of {summary.steps} frames, dropped {dropped}; backlog bounded: "
            f"p95 first half {first:.1f} ms, second half {second:.1f} ms "
            f"({'bounded' if second <= max(2 * first, first + 3 * raw224[0]) else 'GROWING'})"
        )
    finally:
        stop(server, worker)


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
