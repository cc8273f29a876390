"""Ingest throughput and correctness under concurrency, beside the raw disk-write rate of the same bytes.

By default it prepares the database named by DATABASE_URL (an SQLite file in a scratch folder when unset),
creates a project and one agent token per uploader (as `create_agent --kind sim --project` does), starts
the web process exactly as the Procfile's `web` line does (uvicorn, its default logging) with MEDIA_ROOT
in the scratch folder, and removes what it created afterwards:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rs_bench .venv/bin/python bench/ingest.py
    .venv/bin/python bench/ingest.py                      # SQLite default
    .venv/bin/python bench/ingest.py --url http://127.0.0.1:8000 --token "$(cat data/demo_agent_token.txt)"

For each chunk format (binary: robot_agent.chunk_format, the uploader's default; multipart):

1. `--uploaders` agents (default 2) each upload `--episodes` episodes of 50 steps x 2 cameras x 128x128 PNG
   in chunks of 25 steps; frames/s beside the raw rate of writing the same bytes to files in MEDIA_ROOT with
   the ingest path's own system calls (a folder per episode; per frame open, write, chmod, close; no fsync),
   measured right before and after (mean; target: ingest >= 0.5 of raw, and >= 2,000 frames/s on PostgreSQL,
   1,000 on SQLite). CPU time per frame is printed beside it, user and system (kernel) apart: the web
   process's, the PostgreSQL backends' serving this database (when local) and the raw loop's own.
2. `--concurrent` agents (default 50) upload one episode each at once, chunks 0 and 25 of every third
   episode sent twice (retries); frames/s beside raw, then errors and duplicates found (target: 0 and 0).

Why system time is printed apart: creating a file is mostly kernel work, and on a file system that
recently deleted many files it can be most of the cost. ext4 without a journal (this machine's root file
system) does not reuse an inode freed in the last minute (longer while its table block is dirty): each new
file's allocation skips over every such inode of its group, one buffer lookup each. So the cost of a frame
file depends on how many files anything on the machine deleted lately, and the raw loop pays it alike. The
raw loop's files are therefore kept until the bench ends: deleted right before an ingest run, they would
make that run's files, not the raw loop's, pay for skipping them.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after ROOT: bench/inference.py must not hide the inference app
from harness import parse_args, procfile_line, scratch_environment, start_web, stop  # noqa: E402

from robot_agent.uploader import IngestClient  # noqa: E402
from training.synthetic import make_scene  # noqa: E402

STEPS, CAMERAS, SIZE, CHUNK = 50, ("main", "extra"), 128, 25
FRAMES_PER_EPISODE = STEPS * len(CAMERAS)
TARGET_RATIO = 0.5
TARGET_RATE = {"postgresql": 2000, "sqlite": 1000}


def make_frames(seed: int) -> list[dict[str, bytes]]:
    rng = np.random.default_rng(seed)
    frames = []
    for index in range(STEPS):
        per_camera = {}
        for camera in CAMERAS:
            buffer = io.BytesIO()
            Image.fromarray(make_scene(index > STEPS // 2, SIZE, rng)).save(buffer, format="PNG")
            per_camera[camera] = buffer.getvalue()
        frames.append(per_camera)
    return frames


STEP_ROWS = [
    {"index": i, "action": [0.0] * 7, "reward": float(i > STEPS // 2), "success": i > STEPS // 2} for i in range(STEPS)
]


def upload_episode(client: IngestClient, project: str, frames, retry_chunks=()) -> str:
    episode = client.create_episode(project, env_id="bench")
    for start in range(0, STEPS, CHUNK):
        for _attempt in range(2 if start in retry_chunks else 1):
            client.append_steps(episode, STEP_ROWS[start : start + CHUNK], frames[start : start + CHUNK])
    client.finish(episode)
    return episode


@dataclass(frozen=True)
class Cpu:
    """CPU seconds, user and system (kernel) apart."""

    user: float = 0.0
    system: float = 0.0

    def __add__(self, other: Cpu) -> Cpu:
        return Cpu(self.user + other.user, self.system + other.system)

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(self.user - other.user, self.system - other.system)

    def per(self, count: int) -> Cpu:
        return Cpu(self.user / max(count, 1), self.system / max(count, 1))

    def us(self) -> str:
        """Per-frame figures in microseconds: total (user + system)."""
        return f"{(self.user + self.system) * 1e6:4.0f} us ({self.user * 1e6:.0f} + {self.system * 1e6:.0f})"


RAW_FOLDERS: list[str] = []  # the raw loop's files, removed when the bench ends (see the module's note)


def raw_disk_rate(frames, episodes: int) -> tuple[float, Cpu]:
    """Frames/s writing the same bytes the way the ingest path stores them (labeling.frame_files), from one
    thread, with nothing else: a folder per episode in MEDIA_ROOT, per frame one open (same flags), one write,
    the chmod to FILE_UPLOAD_PERMISSIONS and a close; no fsync (nor does the ingest path). Each part measures
    it right before and right after its uploads and takes the mean: on a shared machine the disk's rate moves
    from minute to minute. Returns frames/s and this thread's CPU time per frame."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    mode = _file_mode()
    media = os.environ.get("MEDIA_ROOT")
    if media:
        os.makedirs(media, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="raw-", dir=media)
    RAW_FOLDERS.append(folder)
    start, cpu = time.perf_counter(), _thread_cpu()
    for episode in range(episodes):
        target = os.path.join(folder, str(episode))
        os.mkdir(target)
        for index, per_camera in enumerate(frames):
            for camera, data in per_camera.items():
                handle = os.open(f"{target}/{index:06d}_{camera}.png", flags, 0o666 if mode is None else mode)
                try:
                    os.write(handle, data)
                    if mode is not None:
                        os.fchmod(handle, mode)
                finally:
                    os.close(handle)
    elapsed = time.perf_counter() - start
    used = _thread_cpu() - cpu
    return episodes * FRAMES_PER_EPISODE / elapsed, used.per(episodes * FRAMES_PER_EPISODE)


def _thread_cpu() -> Cpu:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return Cpu(usage.ru_utime, usage.ru_stime)


def remove_raw_files() -> None:
    while RAW_FOLDERS:
        shutil.rmtree(RAW_FOLDERS.pop(), ignore_errors=True)


def _file_mode() -> int | None:
    """FILE_UPLOAD_PERMISSIONS as the web process has it (Django's default, 0o644, against a --url server)."""
    from django.conf import settings

    return settings.FILE_UPLOAD_PERMISSIONS if settings.configured else 0o644


class LocalSetup:
    """The project, agent tokens and web process this bench creates (and removes) when no --url is given."""

    def __init__(self, agents: int):
        self.scratch = scratch_environment("ingest")
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from projects.models import Project
        from projects.services import agent_create

        call_command("migrate", verbosity=0)
        self.backend = connection.vendor
        self.project = Project.objects.create(name=f"Bench ingest {uuid.uuid4().hex[:6]}", camera_views=list(CAMERAS))
        self.agents, self.tokens = [], []
        for number in range(agents):
            agent, token = agent_create(name=f"bench-ingest-{uuid.uuid4().hex[:6]}-{number}", projects=[self.project])
            self.agents.append(agent)
            self.tokens.append(token)
        self.proc, self.url = self._start_web()

    def _start_web(self) -> tuple[subprocess.Popen, str]:
        proc, url = start_web(self.scratch / "web.log")
        print(f"web process: {procfile_line('web')} ({url})")
        return proc, url

    def close(self) -> None:
        import shutil

        from projects.models import Agent

        stop(self.proc, timeout=30)
        Agent.objects.filter(pk__in=[a.pk for a in self.agents]).delete()
        self.project.delete()
        shutil.rmtree(self.scratch, ignore_errors=True)


def process_cpu(pid: int | None) -> Cpu:
    """User and system CPU time of a local process so far (0 when it is not ours to read)."""
    if pid is None:
        return Cpu()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return Cpu()
    tick = os.sysconf("SC_CLK_TCK")
    return Cpu(int(fields[11]) / tick, int(fields[12]) / tick)


class Processes:
    """CPU time of the web process and of the PostgreSQL backends serving the bench's database (when the
    server runs on this machine, so /proc shows them; its other processes, such as the WAL writer, are left
    out), between two calls of `used`."""

    def __init__(self, web_pid: int | None, backends: bool):
        self.web_pid, self.backends = web_pid, backends
        self._start: dict[int | None, Cpu] = {}

    def _now(self) -> dict[int | None, Cpu]:
        now = {None: process_cpu(self.web_pid)}
        for pid in self._backend_pids():
            now[pid] = process_cpu(pid)
        return now

    def _backend_pids(self) -> list[int]:
        if not self.backends:
            return []
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return [row[0] for row in cursor.fetchall()]

    def start(self) -> None:
        self._start = self._now()

    def used(self) -> tuple[Cpu, Cpu]:
        """(web process, PostgreSQL backends) since `start`; a backend that started since counts from 0."""
        now = self._now()
        web = now.pop(None) - self._start.get(None, Cpu())
        backends = Cpu()
        for pid, cpu in now.items():
            backends = backends + (cpu - self._start.get(pid, Cpu()))
        return web, backends


def measure(url: str, tokens: list[str], project: str, binary: bool, args, processes: Processes) -> dict:
    """One format: the throughput part and the concurrent part, each with its raw rate."""
    frames = make_frames(0)

    def client(number: int) -> IngestClient:
        return IngestClient(url, tokens[number % len(tokens)], binary=binary)

    with client(0) as warm:
        upload_episode(warm, project, frames)

    def sequential_uploads(number: int) -> None:
        with client(number) as own:
            for _ in range(args.episodes):
                upload_episode(own, project, frames)

    raw_before, raw_cpu_before = raw_disk_rate(frames, args.episodes * args.uploaders)
    start = time.perf_counter()
    processes.start()
    with ThreadPoolExecutor(max_workers=args.uploaders) as pool:
        list(pool.map(sequential_uploads, range(args.uploaders)))
    frames_sent = args.uploaders * args.episodes * FRAMES_PER_EPISODE
    rate = frames_sent / (time.perf_counter() - start)
    web_cpu, pg_cpu = processes.used()
    raw_after, raw_cpu_after = raw_disk_rate(frames, args.episodes * args.uploaders)
    raw, raw_cpu = (raw_before + raw_after) / 2, (raw_cpu_before + raw_cpu_after).per(2)

    frame_sets = [make_frames(seed) for seed in range(1, 6)]

    def one(number: int):
        with client(number) as own:
            retries = (0, CHUNK) if number % 3 == 0 else ()
            try:
                return upload_episode(own, project, frame_sets[number % 5], retries), None
            except Exception as exc:
                return None, f"{exc.__class__.__name__}: {exc}"

    raw_before, raw_cpu_before = raw_disk_rate(frames, args.concurrent)
    start = time.perf_counter()
    processes.start()
    with ThreadPoolExecutor(max_workers=args.concurrent) as pool:
        results = list(pool.map(one, range(args.concurrent)))
    elapsed = time.perf_counter() - start
    concurrent_web_cpu, concurrent_pg_cpu = processes.used()
    raw_after, raw_cpu_after = raw_disk_rate(frames, args.concurrent)
    raw_concurrent = (raw_before + raw_after) / 2
    raw_concurrent_cpu = (raw_cpu_before + raw_cpu_after).per(2)
    errors = [error for _, error in results if error]
    duplicates = 0
    with client(0) as reader:
        for episode, _ in results:
            if episode:
                detail = reader.call("GET", f"/api/episodes/{episode}")
                duplicates += max(0, detail["num_steps"] - STEPS) + max(0, detail["num_frames"] - FRAMES_PER_EPISODE)
                if detail["num_steps"] < STEPS or detail["num_frames"] < FRAMES_PER_EPISODE:
                    errors.append(f"episode {episode} incomplete: {detail['num_steps']} steps")
    done = sum(1 for e, _ in results if e) * FRAMES_PER_EPISODE
    return {
        "cpu": (web_cpu.per(frames_sent), pg_cpu.per(frames_sent), raw_cpu),
        "concurrent_cpu": (concurrent_web_cpu.per(done), concurrent_pg_cpu.per(done), raw_concurrent_cpu),
        "rate": rate,
        "raw": raw,
        "concurrent_rate": done / elapsed,
        "concurrent_raw": raw_concurrent,
        "errors": errors,
        "duplicates": duplicates,
    }


def report(name: str, found: dict, args, backend: str) -> None:
    floor = TARGET_RATE.get(backend)
    floor_text = f", and >= {floor} frames/s on {backend}" if floor else ""
    rows = [
        (f"{args.uploaders} agents x {args.episodes} episodes", found["rate"], found["raw"], found["cpu"]),
        (
            f"{args.concurrent} concurrent agents, retried chunks",
            found["concurrent_rate"],
            found["concurrent_raw"],
            found["concurrent_cpu"],
        ),
    ]
    print(f"\n{name} chunks ({CHUNK} steps x {len(CAMERAS)} cameras of {SIZE}x{SIZE} PNG):")
    for label, rate, raw, cpu in rows:
        verdict = "meets" if rate >= TARGET_RATIO * raw and (floor is None or rate >= floor) else "BELOW"
        print(
            f"  {label:40s} {rate:7.0f} frames/s | raw disk write {raw:7.0f} frames/s | ratio {rate / raw:.2f} "
            f"(target >= {TARGET_RATIO}{floor_text}): {verdict}"
        )
        web, backends, raw_cpu = cpu
        if web.user + web.system:
            print(
                f"  {'':40s} CPU per frame (user + system): web process {web.us()}, PostgreSQL backends "
                f"{backends.us()}; raw write {raw_cpu.us()}, {1e6 / raw:4.0f} us wall"
            )
    print(f"  errors: {len(found['errors'])} (target 0); duplicates: {found['duplicates']} (target 0)")
    for error in found["errors"][:5]:
        print("    ", error)


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server (default: start the Procfile's web process here)")
    parser.add_argument("--token", default=os.environ.get("RS_TOKEN"), help="with --url: an agent token")
    parser.add_argument("--project", default="PickCube demo", help="with --url: the project to upload to")
    parser.add_argument("--episodes", type=int, default=6, help="episodes per agent in the throughput part")
    parser.add_argument("--uploaders", type=int, default=2, help="agents uploading at once in the throughput part")
    parser.add_argument("--concurrent", type=int, default=50, help="agents uploading at once in the second part")
    parser.add_argument("--format", choices=["binary", "multipart", "both"], default="both")
    args = parse_args(parser, episodes=1, uploaders=1, concurrent=3)
    formats = {"binary": [True], "multipart": [False], "both": [True, False]}[args.format]

    setup = None
    if args.url:
        if not args.token:
            parser.error("--url needs --token (or RS_TOKEN)")
        url, tokens, project, backend = args.url.rstrip("/"), [args.token], args.project, "remote server"
    else:
        setup = LocalSetup(max(args.uploaders, args.concurrent))
        url, tokens, project, backend = setup.url, setup.tokens, setup.project.name, setup.backend
    frames = make_frames(0)
    payload_mb = sum(len(b) for f in frames for b in f.values()) / 1e6
    print(
        f"database: {backend}; episode: {STEPS} steps x {len(CAMERAS)} cameras x {SIZE}x{SIZE} PNG = {payload_mb:.2f} MB"
    )
    try:
        for binary in formats:
            processes = Processes(
                setup.proc.pid if setup is not None else None, setup is not None and backend == "postgresql"
            )
            found = measure(url, tokens, project, binary, args, processes)
            report("binary" if binary else "multipart", found, args, backend)
    finally:
        remove_raw_files()
        if setup is not None:
            setup.close()


if __name__ == "__main__":
    main()
