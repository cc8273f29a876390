"""What the reward service itself costs per request and per image, beside the limits of the machine.

The deployment serves the bench-only instant model (`training/instant`: each image's answer is its first
pixel / 255, so there is no forward pass to hide the service's own cost; the worker runs with BENCH_MODELS=1,
which no user deployment has). `.npy` bodies go through `POST /api/deployments/<name>/rewards` of a stack
started as the Procfile starts it (uvicorn, `manage.py inference_worker` with the Procfile's environment,
Redis from REDIS_URL), at batch 1, 64, 256 and 1,024 of 128x128 and 224x224 images, from one client and from
16 (the lean RL worker of bench/reward_http.py, one keep-alive connection and agent token each). Beside
each figure, measured in the same run and interleaved with it:

- the transport limit: the same bytes through one loopback TCP socket into a numpy array in another process;
- the relay limit: the transport limit plus the hop the service's design adds, the same bytes SET into Redis
  from one connection and read back from another (web process to Redis to worker: the bytes cross two more
  sockets and Redis' memory, whatever the service does with them);
- the same-host limit: a memory copy of the same bytes (`numpy.copyto`);
- the design's floor (one client): the round trip of the same body through bench/design_floor.py, a bare ASGI
  app under the same uvicorn command that hands it to an echo process over Redis as the service does (one
  SET+LPUSH pipeline, BLPOP for the answer), with no authentication, limits, validation or bookkeeping.

Time outside the forward = the round trip minus the instant scorer's own time on that batch (measured here).
CPU ms/req is the web process's / the inference worker's CPU time per request (/proc), the figure a busy
machine moves least.
With 16 clients it is per image: the wall time per image served minus the scorer's time per image. A figure
of 16 clients whose bodies together exceed INFERENCE_QUEUE_MAX_BYTES is skipped (the service refuses such
a flood with 503s by design). The clients run in this process, on the same cores as the service.

`--body json` sends the same images as the endpoint's JSON body instead (`{"images": [<base64 PNG>, ...]}`, each
frame a lossless PNG as reward_client's `png_base64` makes it, encoded once before the timing, as the `.npy` body
is): the web process then decodes the PNGs (INFERENCE_DECODE_COMPRESSED's default). The transport, relay, copy and
floor limits carry that JSON body's bytes.

The processes get REWARDS_RATE_LIMIT=1000000/second (the limiter still runs; its default 300/s per token
would cap the batch-1 figure itself), everything else at its default. Self-contained, as bench/inference.py:

    .venv/bin/python bench/serving_overhead.py [--batches 1,64,256,1024] [--sizes 128,224] [--clients 16] \
        [--body npy|json]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import multiprocessing
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after ROOT: bench/inference.py must not hide the inference app
import design_floor  # noqa: E402
import harness  # noqa: E402  (bench/harness.py: the stack as the Procfile starts it)
from reward_http import LeanRewardClient  # noqa: E402

TMP = harness.scratch_environment("serving-overhead")
os.environ["BENCH_MODELS"] = "1"  # the instant model: benches only
os.environ["REWARDS_RATE_LIMIT"] = "1000000/second"
WORKER_ENV = harness.procfile_env("inference")
_LENGTH = struct.Struct("<Q")


def _recv_exact(conn: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if not n:
            raise ConnectionError("the sender went away")
        got += n


def transport_sink(port: multiprocessing.SimpleQueue, max_bytes: int) -> None:
    """The other end of the transport limit: receive each length-prefixed body into one buffer, view it as
    a numpy array, answer one byte."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port.put(server.getsockname()[1])
        conn, _ = server.accept()
    buffer = bytearray(max_bytes)
    head = bytearray(_LENGTH.size)
    with conn:
        while True:
            _recv_exact(conn, memoryview(head))
            (n,) = _LENGTH.unpack(head)
            if n == 0:
                return
            _recv_exact(conn, memoryview(buffer)[:n])
            np.frombuffer(buffer, dtype=np.uint8, count=n)
            conn.sendall(b"k")


class Transport:
    """The transport limit's sending end (`send`: one body there and its one-byte answer back)."""

    def __init__(self, max_bytes: int):
        context = multiprocessing.get_context("fork")  # before any thread starts
        ports = context.SimpleQueue()
        self.process = context.Process(target=transport_sink, args=(ports, max_bytes), daemon=True)
        self.process.start()
        self.conn = socket.create_connection(("127.0.0.1", ports.get()))
        self.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, body: bytes) -> None:
        self.conn.sendall(_LENGTH.pack(len(body)))
        self.conn.sendall(body)
        if self.conn.recv(1) != b"k":
            raise ConnectionError("the transport sink went away")

    def close(self) -> None:
        self.conn.sendall(_LENGTH.pack(0))
        self.conn.close()
        self.process.join(10)


class RedisRelay:
    """The relay limit's extra hop: `pass_through` SETs a body into Redis from one connection and GETs it from
    another, as a web process hands a batch to an inference worker (without the service's bookkeeping)."""

    def __init__(self, url: str):
        import redis

        self.writer, self.reader = redis.Redis.from_url(url), redis.Redis.from_url(url)
        self.key = f"rs:bench:relay:{uuid.uuid4().hex}"

    def pass_through(self, body: bytes) -> None:
        self.writer.set(self.key, body)
        if len(self.reader.get(self.key) or b"") != len(body):
            raise ConnectionError("the relay lost bytes")

    def close(self) -> None:
        self.writer.delete(self.key)
        self.writer.close()
        self.reader.close()


def setup(clients: int):
    import django

    django.setup()
    from django.core.management import call_command

    from inference.services import deployment_create
    from projects.models import Project
    from projects.services import agent_create
    from training.instant.scorer import KIND
    from training.models import TrainedModel

    call_command("migrate", verbosity=0)
    project, _ = Project.objects.get_or_create(name="bench-serving-overhead")
    model = TrainedModel.objects.create(project=project, kind=KIND, name="bench-instant", checkpoint_path="bench")
    deployment = deployment_create(name=f"bench-{uuid.uuid4().hex[:8]}", trained_model=model)
    agents = [
        agent_create(name=f"bench-rl-{uuid.uuid4().hex[:6]}", kind="rl_worker", projects=[project])
        for _ in range(clients)
    ]
    return project, model, deployment, agents


def images(batch: int, size: int, seed: int) -> np.ndarray:
    array = np.random.default_rng(seed).integers(0, 256, size=(batch, size, size, 3), dtype=np.uint8)
    array[:, 0, 0, 0] = np.arange(batch) % 256  # the instant model's answers differ per image
    return array


def json_body(frames: np.ndarray) -> bytes:
    """The rewards endpoint's JSON body for `frames`: one base64 PNG per frame (lossless: the instant model's
    answers are those of the `.npy` body), encoded as reward_client's `png_base64` does."""
    from PIL import Image

    def png_base64(frame: np.ndarray) -> str:
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="PNG")
        return base64.b64encode(buffer.getvalue()).decode("ascii")

    return json.dumps({"images": [png_base64(frame) for frame in frames]}).encode()


def json_clients(clients: list[LeanRewardClient]) -> None:
    """The lean RL clients send JSON bodies from now on (the same connection, token and path)."""
    for client in clients:
        client.headers["Content-Type"] = "application/json"


def mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.2f}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def row(label: str, clients: int, body: int, latency: float, per_image: float, rate: float, limits: dict) -> str:
    """One line of the table: `latency` and `per_image` outside the forward already, `rate` in bytes/s."""
    return (
        f"{label:>13} {clients:>3} {mb(body):>8} {limits['round_trip'] * 1e3:>9.2f} {_ms(limits.get('floor')):>9} "
        f"{latency * 1e3:>14.2f} "
        f"{per_image * 1e6:>14.1f} {rate / body * limits['batch']:>10.0f} {mb(rate):>10} {mb(limits['tcp']):>10} "
        f"{rate / limits['tcp']:>6.2f} {mb(limits['relay']):>10} {rate / limits['relay']:>6.2f} "
        f"{mb(limits['copy']):>10} {rate / limits['copy']:>6.2g} "
        f"{'/'.join(f'{v * 1e3:.1f}' for v in limits['cpu']):>14}"
    )


def measure(
    frames: np.ndarray,
    clients: list,
    transport: Transport,
    relay: RedisRelay,
    floor: LeanRewardClient,
    scorer,
    args: argparse.Namespace,
    service: list[int],
) -> None:
    """The rows of one body: one client, then all of them, each beside the transport and copy limits."""
    from django.conf import settings

    from inference.broker import dump_npy
    from training.instant.scorer import instant_probabilities

    batch, size = frames.shape[0], frames.shape[1]
    label = f"{batch}x{size}x{size}"
    body = json_body(frames) if args.body == "json" else dump_npy(frames)
    served = [item["probability"] for item in clients[0].items(body)]  # warm, and right
    assert served == instant_probabilities(frames), "served answers differ from the instant model's"
    source = np.frombuffer(body, dtype=np.uint8)
    target = np.empty_like(source)
    if args.body == "json":
        frame_view = frames  # what the web process decodes the PNGs into
    else:
        view = np.frombuffer(body, dtype=np.uint8, count=frames.size, offset=len(body) - frames.size)
        frame_view = view.reshape(frames.shape)
    repeats = max(3, min(args.requests, round(args.mb_per_figure * 1e6 / len(body))))
    forward = statistics.median(harness.timed(lambda: scorer.score(frame_view)) for _ in range(5))
    copy = statistics.median(harness.timed(lambda: np.copyto(target, source)) for _ in range(repeats))
    relay_times = [harness.timed(lambda: relay.pass_through(body)) for _ in range(repeats)]
    cpu_before = np.array(harness.cpu_seconds(service))
    tcp_times, http_times, floor_times = harness.interleaved(
        lambda _: transport.send(body),
        lambda _: clients[0].rewards(body),
        lambda _: floor.rewards(body),
        repeats=repeats,
        idle_s=args.idle_ms / 1e3,
    )
    cpu = (np.array(harness.cpu_seconds(service)) - cpu_before) / repeats
    round_trip = statistics.median(http_times)
    tcp = statistics.median(tcp_times)
    limits = {
        "batch": batch,
        "tcp": len(body) / tcp,
        "relay": len(body) / (tcp + statistics.median(relay_times)),
        "copy": len(body) / copy,
        "cpu": cpu,
        "floor": statistics.median(floor_times),
    }
    outside = round_trip - forward
    print(
        row(label, 1, len(body), outside, outside / batch, len(body) / round_trip, limits | {"round_trip": round_trip}),
        flush=True,  # each figure as it is measured
    )
    many = len(clients)
    if many < 2:
        return
    if many * len(body) > settings.INFERENCE_QUEUE_MAX_BYTES:
        print(
            f"{label:>13} {many:>3} skipped: {many} bodies of {mb(len(body))} MB exceed "
            f"INFERENCE_QUEUE_MAX_BYTES ({mb(settings.INFERENCE_QUEUE_MAX_BYTES)} MB): 503s by design",
            flush=True,
        )
        return
    # each client's share of the figure's bytes, up to --requests each (a few one-image requests per client would
    # time the threads' start, not the service)
    per_client = max(2, min(args.requests, round(args.mb_per_figure * 1e6 / len(body) / many)))

    def run_client(client: LeanRewardClient) -> list[float]:
        return [harness.timed(lambda: client.rewards(body)) for _ in range(per_client)]

    tcp_before = [harness.timed(lambda: transport.send(body)) for _ in range(per_client)]
    with ThreadPoolExecutor(many) as pool:
        cpu_before, started = np.array(harness.cpu_seconds(service)), time.perf_counter()
        latencies = [t for own in pool.map(run_client, clients) for t in own]
        wall = time.perf_counter() - started
    limits["cpu"] = (np.array(harness.cpu_seconds(service)) - cpu_before) / len(latencies)
    limits.pop("floor")  # measured for one client
    tcp_after = [harness.timed(lambda: transport.send(body)) for _ in range(per_client)]
    limits["tcp"] = len(body) / statistics.median(tcp_before + tcp_after)
    limits["relay"] = 1 / (1 / limits["tcp"] + statistics.median(relay_times) / len(body))
    latency = statistics.median(latencies)
    per_image = wall / (len(latencies) * batch) - forward / batch
    rate = len(latencies) * len(body) / wall
    print(row(label, many, len(body), latency - forward, per_image, rate, limits | {"round_trip": latency}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,64,256,1024", help="images per request, comma-separated")
    parser.add_argument("--sizes", default="128,224", help="image sides, comma-separated")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients of the second scenario")
    parser.add_argument("--requests", type=int, default=50, help="most requests per figure (fewer for large bodies)")
    parser.add_argument("--mb-per-figure", type=float, default=300.0, help="about this many MB sent per figure")
    parser.add_argument(
        "--idle-ms",
        type=float,
        default=0.0,
        help="one client: the machine idles this long before each timed call (service, floor and TCP alike), as "
        "between an RL worker's steps; 0: back to back",
    )
    parser.add_argument(
        "--body",
        choices=("npy", "json"),
        default="npy",
        help="the rewards body: npy (application/x-npy) or json (base64 PNG images, application/json)",
    )
    args = harness.parse_args(parser, batches="1,64", sizes="32", clients=2, requests=3, mb_per_figure=1.0)
    batches = [int(b) for b in args.batches.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    largest = max(batches) * max(sizes) ** 2 * 3 + 4096
    if args.body == "json":
        largest = largest * 2  # base64 (4/3) of PNGs of noise (a little over the pixels' bytes)
    transport = Transport(largest)  # forked before Django's and redis' threads start
    project, model, deployment, agents = setup(max(1, args.clients))
    from django.conf import settings

    relay = RedisRelay(settings.REDIS_URL)

    from training.instant.scorer import InstantScorer
    from training.kit.family_parts import ModelSpec

    scorer = InstantScorer(ModelSpec(kind="instant", folder=TMP))
    env = dict(os.environ)
    logs = TMP / "logs"
    logs.mkdir()
    server, url = harness.start_web(logs / "uvicorn.log", env)
    worker = harness.start_inference_worker(logs / "worker.log", env)
    queue = f"rs:bench:floor:{uuid.uuid4().hex}"
    floor_env = {**env, "REDIS_URL": settings.REDIS_URL, design_floor.QUEUE_ENV: queue}
    floor_server, floor_url = harness.start_web(logs / "floor.log", floor_env, app=design_floor.APP)
    floor_worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from bench.design_floor import echo_worker; echo_worker({settings.REDIS_URL!r}, {queue!r})",
        ],
        cwd=ROOT,
    )
    try:
        harness.wait_for_inference_worker(worker)
        service = [server.pid, worker.pid]  # uvicorn is exec'd by its bash line: the same process
        clients = [LeanRewardClient(url, token, deployment.name) for _, token in agents]
        floor = LeanRewardClient(floor_url, "floor", deployment.name)
        if args.body == "json":
            json_clients([*clients, floor])
        print(
            f"instant model (BENCH_MODELS=1), uvicorn as the Procfile, worker "
            f"{' '.join(f'{k}={v}' for k, v in WORKER_ENV.items())}, max_batch_size {deployment.max_batch_size}, "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start"
            + (f", one client idling {args.idle_ms:g} ms before each call" if args.idle_ms else "")
            + (", JSON bodies (base64 PNG images)" if args.body == "json" else "")
        )
        print(
            f"{'images':>13} {'cl':>3} {'body MB':>8} {'round ms':>9} {'floor ms':>9} {'outside/req ms':>14} {'outside/img us':>14} "
            f"{'images/s':>10} {'HTTP MB/s':>10} {'TCP MB/s':>10} {'ratio':>6} {'relay MB/s':>10} {'ratio':>6} "
            f"{'copy MB/s':>10} {'ratio':>6} "
            f"{'CPU ms/req':>14}"
        )
        for size in sizes:
            for batch in batches:
                measure(images(batch, size, seed=batch + size), clients, transport, relay, floor, scorer, args, service)
        print(
            f"load average {os.getloadavg()[0]:.1f} at the end. round ms: median round trip (16 clients: each "
            "request's); floor ms: bench/design_floor.py's round trip for the same body (uvicorn, one Redis SET+LPUSH "
            "and BLPOP, an echo process; nothing else); outside: minus the instant scorer's own time; ratio: HTTP bytes/s over the limit's (relay: TCP plus "
            "one Redis SET and GET of the same bytes); CPU ms/req: "
            "the web process's / the inference worker's, per request (/proc, 10 ms ticks)"
        )
    finally:
        transport.close()
        relay.close()
        design_floor.stop_echo_worker(settings.REDIS_URL, queue)
        harness.stop(server, worker, floor_server, floor_worker)
        deployment.delete()
        model.delete()
        for agent, _ in agents:
            agent.delete()
        if project.trained_models.count() == 0 and project.episodes.count() == 0:
            project.delete()


if __name__ == "__main__":
    main()
