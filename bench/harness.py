"""Shared bench plumbing: a scratch environment, a free local port, the Procfile's processes, waiting for a server,
and the `--smoke` size every bench takes."""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_args(parser: argparse.ArgumentParser, **smoke: object) -> argparse.Namespace:
    """The bench's options, with `--smoke`: the given sizes (an option's name: its smoke value), the smallest
    that still run every part end to end in seconds. The test suite runs each bench so (tests/bench); its
    figures mean nothing. An option given on the command line keeps its value."""
    sizes = " ".join(f"--{name.replace('_', '-')} {value}" for name, value in smoke.items() if value is not True)
    flags = " ".join(f"--{name.replace('_', '-')}" for name, value in smoke.items() if value is True)
    parser.add_argument(
        "--smoke", action="store_true", help=f"a run of seconds that checks the bench works: {sizes} {flags}".strip()
    )
    args = parser.parse_args()
    if args.smoke:
        for name, value in smoke.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    return args


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited at start with code {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on port {port} after {timeout}s")


def scratch_environment(name: str) -> Path:
    """A scratch folder for a self-contained bench run, with the settings its processes share:
    an SQLite database and stored files inside it (unless DATABASE_URL is given), DEBUG off, quiet logs."""
    scratch = Path(tempfile.mkdtemp(prefix=f"rs-bench-{name}-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{scratch / 'bench.sqlite3'}")
    os.environ["MEDIA_ROOT"] = str(scratch / "media")
    os.environ["RS_RUN_ENV"] = ""  # self-contained: not the settings a running app's run command wrote
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    return scratch


def procfile_line(process: str) -> str:
    """The command of a Procfile line (`web: uvicorn ...` gives `uvicorn ...`)."""
    for line in (ROOT / "Procfile").read_text().splitlines():
        name, _, command = line.partition(":")
        if name.strip() == process:
            return command.strip()
    raise KeyError(f"no {process!r} line in the Procfile")


def start_web(log: Path, env: dict[str, str] | None = None, app: str | None = None) -> tuple[subprocess.Popen, str]:
    """The Procfile's `web` process (its flags and logging, this Python's uvicorn) on a free loopback port;
    `app` swaps the ASGI application it serves. One web process (`RS_WEB_PROCESSES` 1, the returned process: its
    CPU and memory are the web's) unless `env` asks for more. Returns the process, once listening, and its URL."""
    port = free_port()
    command = procfile_line("web")
    if app:
        command = command.replace("webapp.asgi:application", app)
    env = {
        "RS_WEB_PROCESSES": "1",
        **(os.environ if env is None else env),
        "RS_HOST": "127.0.0.1",
        "RS_PORT": str(port),
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.Popen(
        ["bash", "-c", "exec " + command],
        cwd=ROOT,
        env=env,
        stdout=open(log, "w"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.STDOUT,
    )
    wait_for_port(port, proc)
    return proc, f"http://127.0.0.1:{port}"


def start_inference_worker(log: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    """`manage.py inference_worker [args]` with the Procfile's inference environment, its output in `log`."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "inference_worker", *args],
        cwd=ROOT,
        env={**env, **procfile_env("inference")},  # as the Procfile's inference line
        stdout=open(log, "w"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.STDOUT,
    )


def wait_for_inference_worker(proc: subprocess.Popen, timeout: float = 300.0) -> None:
    """Until the inference worker `proc` (`manage.py inference_worker`, started here) wrote its first heartbeat:
    on a busy machine its start (torch, Django) can outlast the 30 s a reward request waits for a worker."""
    from django.conf import settings

    from common.redis_clients import redis_from_url
    from inference.broker import WORKERS_KEY

    redis = redis_from_url(settings.REDIS_URL)
    deadline = time.monotonic() + timeout
    while not any(key.decode().endswith(f":{proc.pid}") for key in redis.hkeys(WORKERS_KEY)):
        if proc.poll() is not None:
            raise RuntimeError(f"inference worker exited at start with code {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no heartbeat from the inference worker after {timeout}s")
        time.sleep(0.2)


def stop(*procs: subprocess.Popen, timeout: float = 15.0) -> None:
    """Stop started processes: terminate all, then kill any still running after `timeout` seconds."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def procfile_env(process: str) -> dict[str, str]:
    """The environment assignments that lead a Procfile line (`inference: OMP_WAIT_POLICY=PASSIVE python ...`
    gives {"OMP_WAIT_POLICY": "PASSIVE"}), so a bench starts the process as the Procfile does and can
    measure its raw limit under the same settings."""
    env = {}
    for word in shlex.split(procfile_line(process)):
        key, eq, value = word.partition("=")
        if not eq or not key.isidentifier():
            break
        env[key] = value
    return env


def cpu_seconds(pids: list[int]) -> list[float]:
    """User + system CPU seconds each process has used so far (Linux /proc, 10 ms ticks): what a process costs
    whatever else the machine runs."""
    seconds = []
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        seconds.append((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return seconds


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of `fn` takes."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def interleaved(*calls: Callable[[int], object], repeats: int, idle_s: float = 0.0) -> tuple[list[float], ...]:
    """Seconds per call of each, taking turns: calls[0](0), calls[1](0), ..., calls[0](1), ...: every side sees
    the same moments of a shared machine (its speed can swing by a quarter within a minute). With `idle_s`, the
    machine idles that long (untimed) before each call, as it does between an RL worker's steps."""
    times: tuple[list[float], ...] = tuple([] for _ in calls)
    for i in range(repeats):
        for call, own in zip(calls, times, strict=True):
            if idle_s:
                time.sleep(idle_s)
            own.append(timed(partial(call, i)))
    return times
