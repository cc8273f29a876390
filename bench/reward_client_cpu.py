"""The reward client's own CPU per request: `RewardClient` against the lean `http.client` worker.

A stub server in another process answers `POST /api/deployments/<name>/rewards` with a fixed one-item JSON
answer (no model, no Django), so the CPU time of this process (`time.process_time`) is the client's alone:
encoding the `.npy` body, HTTP over a kept-alive connection, parsing the answer. Clients measured:

  RewardClient                   the project's client (urllib3 on its hot path)
  RewardClient(session=...)      the same with a caller's requests.Session (the requests path)
  LeanRewardClient               bench/reward_http.py: http.client, body encoded once (the floor)

    .venv/bin/python bench/reward_client_cpu.py [--requests 500] [--size 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))  # before bench/, whose inference.py would hide the inference package
from harness import free_port, parse_args, wait_for_port  # noqa: E402
from reward_http import LeanRewardClient  # noqa: E402

from inference.broker import dump_npy  # noqa: E402
from reward_client import RewardClient  # noqa: E402

STUB_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = b'{"items": [{"probability": 0.25, "success": false, "reward": 0.0, "scored": true, "model_output": 0.25}], "version": 1}'

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def measure(call, count: int) -> tuple[float, float]:
    """Client CPU µs per call and median wall ms, after a few warm-up calls."""
    for _ in range(5):
        call()
    walls = []
    cpu_started = time.process_time()
    for _ in range(count):
        started = time.perf_counter()
        call()
        walls.append(time.perf_counter() - started)
    return (time.process_time() - cpu_started) / count * 1e6, statistics.median(walls) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--size", type=int, default=128, help="image side of the single-image requests")
    args = parse_args(parser, requests=20, size=32)

    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", STUB_SERVER, str(port)])
    try:
        wait_for_port(port, server)
        url, token, name = f"http://127.0.0.1:{port}", "rs_bench", "stub"
        image = np.random.default_rng(0).integers(0, 256, size=(1, args.size, args.size, 3), dtype=np.uint8)
        body = dump_npy(image)
        client = RewardClient(url, token, name)
        on_requests = RewardClient(url, token, name, session=requests.Session())
        lean = LeanRewardClient(url, token, name)
        print(f"{args.requests} single-image requests ({args.size}x{args.size}), load average {os.getloadavg()[0]:.2f}")
        print(f"{'client':<44} {'CPU µs/request':>15} {'median ms':>10}")
        for label, call in [
            ("RewardClient.compute_rewards", lambda: client.compute_rewards(image)),
            ("  same, with dones/env_rewards/stream", lambda: client.compute_rewards(image, [0.5], [0], stream="r0")),
            ("RewardClient(session=requests.Session())", lambda: on_requests.compute_rewards(image)),
            ("LeanRewardClient (body encoded once)", lambda: lean.rewards(body)),
        ]:
            cpu_us, wall_ms = measure(call, args.requests)
            print(f"{label:<44} {cpu_us:>15.0f} {wall_ms:>10.3f}")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
