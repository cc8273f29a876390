"""Reward serving benchmark: the REST API + inference worker against a plain in-process forward pass.

Model: RLinf ResNet18 reward classifier (hidden_dim 256) at 128x128, random weights, on the CPU. The
limit is `predict_proba` of the same checkpoint in this process with the same torch threads as the
worker, measured in the same run, right before each service figure:

  1. batch of 64 through the REST API: throughput vs the raw batch-64 forward   (target ratio >= 0.9)
  2. one client sending single images: median latency vs raw single-image forward (target <= raw + 3 ms),
     and the mean round trip split into the worker's own scoring time and the rest of the path
  3. 16 concurrent clients sending single images: aggregate throughput vs the raw throughput at the mean
     batch size the worker formed in that run (target ratio >= 0.9), with p50/p99 latency and the raw
     batch-1 rate beside it. It runs in rounds (--rounds, default 3), each measured beside its own raw
     limit; the median round is the figure and every round is printed (one short burst on a shared
     2-core machine moves by 0.1). (A machine cannot beat its own forward pass at the batch it forms: this is
     the honest limit, where a fixed multiple of the batch-1 rate may be out of reach on small CPUs.)
     Beside it, where the time went in the median round: the cores the web process, the clients and the worker
     used (/proc), and the worker's own time scoring (its `rs_inference_batch_seconds`, from its metrics port)
     against the raw forward at the batch formed. Where the web process, Redis and the clients share the
     forward's cores (the raw limit had them alone), the forward itself runs slower: compare with `--threads`
     one below the core count to leave them a core.

Self-contained: it migrates the database named by DATABASE_URL (default: an SQLite file in a temporary
folder), writes the checkpoint to a temporary MEDIA_ROOT, starts uvicorn and `manage.py inference_worker
--threads N` on a free port, and removes what it created:

    .venv/bin/python bench/inference.py [--threads 2] [--requests 200] [--clients 16] [--max-wait-ms 2]

Scenarios 1 and 2 and the correctness check go through the project's `RewardClient` (its urllib3
keep-alive pool), as an RL worker using it would; scenario 2 also prints the lean RL worker's figure
(bench/reward_http.py: `http.client`, one keep-alive connection, `.npy` bodies encoded once) for
reference. Scenario 3 uses the lean worker, the cheaper of the two per request (about 80 against 170 µs
of client CPU, bench/reward_client_cpu.py): its 16 clients' CPU runs on the same cores as the service, so
a heavier client would lower the throughput it measures.

The worker runs as the Procfile starts it, with the environment its `inference:` line sets
(`OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000`: torch's idle threads spin briefly, then sleep), and the raw
forward in this process runs under the same settings (applied before torch loads), so both sides pay the
same thread wake-ups.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after ROOT: bench/inference.py must not hide the inference app
from harness import (  # noqa: E402
    cpu_seconds,
    free_port,
    interleaved,
    parse_args,
    procfile_env,
    scratch_environment,
    start_inference_worker,
    start_web,
    stop,
    timed,
    wait_for_inference_worker,
)
from reward_http import LeanRewardClient  # noqa: E402

TMP = scratch_environment("inference")
WORKER_ENV = procfile_env("inference")
os.environ.update(WORKER_ENV)  # the raw forward runs as the worker does (OpenMP reads it when torch loads)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def setup(size: int, max_wait_ms: float):
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
    torch.manual_seed(0)
    config = ResNetConfig(arch="resnet18", image_size=[3, size, size], hidden_dim=256, dropout=0.1)
    folder = f"checkpoints/bench_{uuid.uuid4().hex[:8]}"
    save_checkpoint(RewardResNet(config).eval(), config, default_storage.path(folder), metrics={}, step=0)
    project, _ = Project.objects.get_or_create(name="bench-inference")
    model = TrainedModel.objects.create(project=project, kind="resnet", name="bench-resnet18", checkpoint_path=folder)
    deployment = deployment_create(
        name=f"bench-{uuid.uuid4().hex[:8]}", trained_model=model, max_batch_size=64, max_wait_ms=max_wait_ms
    )
    # an RL worker's token: rewards on this project, as `create_agent --kind rl_worker --project` makes it
    agent, token = agent_create(name=f"bench-rl-{uuid.uuid4().hex[:6]}", kind="rl_worker", projects=[project])
    return project, model, deployment, agent, token, default_storage.path(folder)


def worker_counts() -> tuple[int, int]:
    """Requests served and batches run, summed over the inference workers' heartbeats."""
    import json

    from django.conf import settings

    from common.redis_clients import redis_from_url
    from inference.broker import WORKERS_KEY

    beats = [json.loads(v) for v in redis_from_url(settings.REDIS_URL).hgetall(WORKERS_KEY).values()]
    return sum(b.get("served", 0) for b in beats), sum(b.get("batches", 0) for b in beats)


def scoring_seconds(metrics_url: str, deployment: str) -> tuple[float, int]:
    """The inference worker's time spent scoring batches of `deployment` so far, and how many batches
    (its `rs_inference_batch_seconds` histogram, from its Prometheus port)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    found = {"sum": 0.0, "count": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == "rs_inference_batch_seconds":
            for sample in family.samples:
                kind = sample.name.rsplit("_", 1)[-1]
                if kind in found and sample.labels.get("deployment") == deployment:
                    found[kind] = sample.value
    return found["sum"], int(found["count"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=0, help="torch threads for raw and worker (0: torch default)")
    parser.add_argument("--requests", type=int, default=200, help="single-image requests per scenario")
    parser.add_argument("--batches", type=int, default=10, help="batch-64 requests")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of scenario 3, each beside its own raw limit (the median counts)"
    )
    parser.add_argument(
        "--app",
        default="webapp.asgi:application",
        help="ASGI app to serve",
    )
    parser.add_argument("--max-wait-ms", type=float, default=2.0, help="the deployment's batching wait")
    parser.add_argument("--size", type=int, default=128, help="image side (the targets are for 128)")
    args = parse_args(parser, requests=8, batches=2, clients=2, rounds=1, size=32)

    import torch

    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    project, model, deployment, agent, token, folder = setup(args.size, args.max_wait_ms)

    from inference.broker import dump_npy
    from reward_client import RewardClient
    from training.resnet.checkpoint import load_checkpoint, predict_proba

    raw_model, _ = load_checkpoint(folder, "cpu")
    rng = np.random.default_rng(0)
    batch64 = rng.integers(0, 256, size=(64, args.size, args.size, 3), dtype=np.uint8)
    singles = [rng.integers(0, 256, size=(1, args.size, args.size, 3), dtype=np.uint8) for _ in range(32)]
    bodies = [dump_npy(image) for image in singles]  # what the lean clients send

    env = dict(os.environ)
    logs = TMP / "logs"
    logs.mkdir()
    server, url = start_web(logs / "uvicorn.log", env, app=args.app)
    metrics_port = free_port()
    worker = start_inference_worker(
        logs / "worker.log", env, "--threads", str(threads), "--metrics-port", str(metrics_port)
    )
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        wait_for_inference_worker(worker)
        client = RewardClient(url, token, deployment.name)
        lean = LeanRewardClient(url, token, deployment.name)
        for _ in range(5):  # warm up: model loaded, connections open
            client.compute_rewards(batch64[:8])
            client.compute_rewards(singles[0])
            lean.rewards(bodies[0])
        served = client.compute_rewards(batch64).probabilities
        assert np.allclose(served, predict_proba(raw_model, batch64), atol=1e-5), "served probabilities differ"

        print(
            f"ResNet18 {args.size}x{args.size}, CPU, torch threads {threads} (raw in-process and worker), "
            f"max_batch_size 64, max_wait_ms {args.max_wait_ms:g}, "
            f"worker and raw {' '.join(f'{k}={v}' for k, v in WORKER_ENV.items())} (Procfile), "
            f"load average {os.getloadavg()[0]:.1f}, "
            f"server {args.app}"
        )
        print(f"{'scenario':<44} {'service':>14} {'raw limit':>14} {'ratio':>7}  target")

        # Raw and service calls alternate, so that both see the same load from anything else on the machine.
        # 1. batch of 64
        raw_times, api_times = interleaved(
            lambda _: predict_proba(raw_model, batch64), lambda _: client.compute_rewards(batch64), repeats=args.batches
        )
        raw_tput, api_tput = 64 / statistics.median(raw_times), 64 / statistics.median(api_times)
        print(
            f"{'1. batch of 64 via REST (images/s)':<44} {api_tput:>14.1f} {raw_tput:>14.1f} "
            f"{api_tput / raw_tput:>7.2f}  >= 0.90"
        )

        # 2. one client, single images: RewardClient, then the lean worker for reference
        for label, call, target in (
            ("2. one client, median latency (ms)", lambda _: client.compute_rewards(singles[1]), "  <= +3.00 ms"),
            ("   same, lean http.client worker, reference", lambda _: lean.rewards(bodies[1]), ""),
        ):
            scoring_before = scoring_seconds(metrics_url, deployment.name)
            raw_times, latencies = interleaved(
                lambda _: predict_proba(raw_model, singles[0]), call, repeats=args.requests
            )
            scored_s, scored_batches = (
                b - a for a, b in zip(scoring_before, scoring_seconds(metrics_url, deployment.name), strict=True)
            )
            median_ms, raw1_ms = statistics.median(latencies) * 1000, statistics.median(raw_times) * 1000
            print(f"{label:<44} {median_ms:>14.2f} {raw1_ms:>14.2f} {median_ms - raw1_ms:>+7.2f}{target}")
            mean_ms, raw_mean_ms = statistics.mean(latencies) * 1000, statistics.mean(raw_times) * 1000
            scoring_ms = 1000 * scored_s / max(1, scored_batches)
            print(
                f"   means: round trip {mean_ms:.2f} ms = the worker's scoring {scoring_ms:.2f} ms (raw forward "
                f"{raw_mean_ms:.2f} ms) + the rest of the path {mean_ms - scoring_ms:.2f} ms"
            )

        # 3. concurrent clients, single images, in rounds (raw batch-1 rate: the median of runs before and after)
        per_client = max(1, args.requests // args.clients * 2)
        clients = [LeanRewardClient(url, token, deployment.name) for _ in range(args.clients)]

        def run_client(c: LeanRewardClient) -> list[float]:
            own = []
            for i in range(per_client):
                started = time.perf_counter()
                c.rewards(bodies[i % len(bodies)])
                own.append(time.perf_counter() - started)
            return own

        def crowd_round(pool: ThreadPoolExecutor) -> dict:
            """One round: the raw batch-1 rate, the clients' burst, the raw rate at the batch size formed."""
            raw_before = [timed(lambda: predict_proba(raw_model, singles[0])) for _ in range(args.requests // 4)]
            served_before, batches_before = worker_counts()
            scoring_before = scoring_seconds(metrics_url, deployment.name)
            cpu_before, started = cpu_seconds(processes), time.perf_counter()
            latencies = [x for own in pool.map(run_client, clients) for x in own]
            wall = time.perf_counter() - started
            scoring_after = scoring_seconds(metrics_url, deployment.name)
            web, forward, bench = ((b - a) / wall for a, b in zip(cpu_before, cpu_seconds(processes), strict=True))
            time.sleep(1.5)  # the worker's next heartbeat
            served_after, batches_after = worker_counts()
            raw_after = [timed(lambda: predict_proba(raw_model, singles[0])) for _ in range(args.requests // 4)]
            mean_batch = (served_after - served_before) / max(1, batches_after - batches_before)
            formed = np.concatenate([singles[i % len(singles)] for i in range(max(1, round(mean_batch)))])
            raw_formed = len(formed) / statistics.median(
                [timed(lambda: predict_proba(raw_model, formed)) for _ in range(max(5, args.requests // 8))]
            )
            rate = len(latencies) / wall
            scored_s, scored_batches = (b - a for a, b in zip(scoring_before, scoring_after, strict=True))
            return {
                "scoring": scored_s / wall,  # share of the burst the worker spent scoring
                "batch_ms": 1000 * scored_s / max(1, scored_batches),
                "raw_batch_ms": 1000 * len(formed) / raw_formed,
                "cores": {"web": web, "clients": bench, "worker": forward},
                "rate": rate,
                "raw_formed": raw_formed,
                "ratio": rate / raw_formed,
                "formed": len(formed),
                "mean_batch": mean_batch,
                "raw_rate": 1 / statistics.median(raw_before + raw_after),
                "latencies": latencies,
            }

        cores = len(os.sched_getaffinity(0))
        processes = [server.pid, worker.pid, os.getpid()]  # this process: the clients (the raw forward waits)
        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(lambda c: c.rewards(bodies[0]), clients))  # connections open
            rounds = [crowd_round(pool) for _ in range(args.rounds)]
        middle = sorted(rounds, key=lambda r: r["ratio"])[(len(rounds) - 1) // 2]  # the median round
        print(
            f"{f'3. {args.clients} clients, single images (images/s)':<44} {middle['rate']:>14.1f} "
            f"{middle['raw_formed']:>14.1f} {middle['ratio']:>7.2f}  >= 0.90 (raw at batch {middle['formed']}; "
            f"median of {len(rounds)} rounds)"
        )
        print(
            f"   latency p50 {percentile(middle['latencies'], 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(middle['latencies'], 0.99) * 1000:.1f} ms over {len(middle['latencies'])} requests, "
            f"{middle['mean_batch']:.1f} requests per batch; raw batch-1 rate {middle['raw_rate']:.1f} "
            f"({middle['rate'] / middle['raw_rate']:.2f}x)"
        )
        used = middle["cores"]
        print(
            f"   cores busy during the burst (of {cores}): web process {used['web']:.2f}, clients {used['clients']:.2f}, "
            f"inference worker {used['worker']:.2f} (the raw limit had the cores to itself)"
        )
        print(
            f"   the worker scored for {middle['scoring']:.0%} of the burst, {middle['batch_ms']:.1f} ms per batch of "
            f"{middle['mean_batch']:.1f} (its rs_inference_batch_seconds) against the raw forward's "
            f"{middle['raw_batch_ms']:.1f} ms at batch {middle['formed']}"
        )
        print(
            "   every round (service / raw at the batch formed): "
            + ", ".join(f"{r['rate']:.1f}/{r['raw_formed']:.1f} = {r['ratio']:.2f}" for r in rounds)
        )
    finally:
        stop(server, worker)
        deployment.delete()
        model.delete()
        agent.delete()
        if project.trained_models.count() == 0 and project.episodes.count() == 0:
            project.delete()


if __name__ == "__main__":
    main()
