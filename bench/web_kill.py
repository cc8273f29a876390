"""A web process killed under load: how many reward requests reward_client loses (issue 39).

The Procfile's web line runs `--workers ${RS_WEB_PROCESSES:-2}` web processes on one listening socket, held
by uvicorn's parent, which starts a new process in place of one that dies. This bench starts that line, an
inference worker that answers at once (bench/same_host.py's scorer: the first pixel's red value), and
`--clients` threads, each a `reward_client.RewardClient` (HTTP) asking for rewards in a loop. Half-way
through it `kill -9`s one web process: the requests that process held lose their connection, and
reward_client sends them again (a reward call is idempotent), to the process still serving. Target:
0 lost requests from reward_client's point of view, and every answer the right one (the probabilities of
the frames sent). Printed beside it: requests answered, how many reward_client sent again, the slowest
answer, and when the parent had a new web process serving.

Self-contained (an SQLite database in a temporary folder unless DATABASE_URL is set; REDIS_URL must
answer):

    .venv/bin/python bench/web_kill.py [--clients 50] [--seconds 20] [--batch 8] [--size 64]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))
from harness import parse_args, scratch_environment, start_web, stop  # noqa: E402
from same_host import DEPLOYMENT, setup  # noqa: E402


def web_processes(parent: int) -> list[int]:
    """The web processes uvicorn's parent `parent` runs (its multiprocessing children, not its tracker)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"spawn_main" in command:
            pids.append(int(entry.name))
    return sorted(pids)


class Clients:
    """`count` threads asking for rewards until `stop` is set; answers, failures and latencies counted."""

    def __init__(self, url: str, token: str, count: int, batch: int, size: int) -> None:
        from reward_client import RewardClient

        self.clients = [RewardClient(url, token, DEPLOYMENT, transport="http") for _ in range(count)]
        self.batch, self.size = batch, size
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.answered = 0
        self.failures: list[str] = []
        self.wrong = 0
        self.slowest = 0.0
        self.started = [threading.Event() for _ in range(count)]
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(count)]

    def run(self, index: int) -> None:
        client = self.clients[index]
        rng = np.random.default_rng(index)
        while not self.stop.is_set():
            frames = rng.integers(0, 256, size=(self.batch, self.size, self.size, 3), dtype=np.uint8)
            began = time.monotonic()
            try:
                result = client.compute_rewards(frames)
            except Exception as exc:  # a lost request, whatever reward_client raised
                with self.lock:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                continue
            took = time.monotonic() - began
            right = np.allclose(result.probabilities, frames[:, 0, 0, 0] / 255.0, atol=1e-6)
            with self.lock:
                self.answered += 1
                self.wrong += not right
                self.slowest = max(self.slowest, took)
            self.started[index].set()

    @property
    def resent(self) -> int:
        return sum(client.lost_retried for client in self.clients)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50, help="reward_client threads asking at once")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long they ask; the kill is half-way")
    parser.add_argument("--batch", type=int, default=8, help="frames per request")
    parser.add_argument("--size", type=int, default=64, help="frame side in pixels")
    args = parse_args(parser, clients=4, seconds=4.0, batch=2, size=16)
    import django

    # The clients share one token: the per-token limiter (300/s by default) would answer a fast machine's clients
    # 429, which is not what this bench is about (it still runs; bench/serving_overhead.py does the same).
    os.environ["REWARDS_RATE_LIMIT"] = "1000000/second"
    scratch = scratch_environment("web-kill")
    django.setup()
    token = setup()
    env = {**os.environ, "RS_WEB_PROCESSES": os.environ.get("RS_WEB_PROCESSES", "2")}
    web, url = start_web(scratch / "web.log", env)
    with open(scratch / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "same_host.py"), "--worker"],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    clients = Clients(url, token, args.clients, args.batch, args.size)
    try:
        for thread in clients.threads:
            thread.start()
        for started in clients.started:  # every client answered once: the service is warm
            if not started.wait(180) or clients.failures:
                raise RuntimeError(f"the clients did not start: {clients.failures[:3]}")
        before = web_processes(web.pid)
        time.sleep(args.seconds / 2)
        victim = before[0]
        os.kill(victim, signal.SIGKILL)
        answered_before = clients.answered
        killed_at = time.monotonic()
        replaced = None
        while time.monotonic() - killed_at < args.seconds / 2 or replaced is None:
            now = web_processes(web.pid)
            if replaced is None and len(now) == len(before) and victim not in now:
                replaced = time.monotonic() - killed_at
            if time.monotonic() - killed_at > 120:
                break
            time.sleep(0.05)
        clients.stop.set()
        for thread in clients.threads:
            thread.join(timeout=200)
        after = web_processes(web.pid)
    finally:
        clients.stop.set()
        stop(worker, web)
    print(f"web processes killed under load: {args.clients} reward clients, {args.batch} x {args.size}x{args.size}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print(f"web processes before the kill: {len(before)}; after: {len(after)}; killed pid {victim}")
    print(f"a new web process started after: {'never' if replaced is None else f'{replaced:.1f} s'}")
    print(f"requests answered: {clients.answered} ({answered_before} before the kill)")
    print(f"sent again by reward_client: {clients.resent}; slowest answer: {clients.slowest:.2f} s")
    print(f"wrong answers: {clients.wrong} (target 0)")
    print(f"lost requests: {len(clients.failures)} (target 0)")
    for failure in clients.failures[:5]:
        print(f"  {failure}")
    shutil.rmtree(scratch, ignore_errors=True)
    sys.exit(1 if clients.failures or clients.wrong or replaced is None else 0)


if __name__ == "__main__":
    main()
