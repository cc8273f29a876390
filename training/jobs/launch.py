"""Starting a job's training: in this process, or data-parallel under torchrun when its config asks for it.

A job with `processes` x `nodes` > 1 is run by `python -m torch.distributed.run` (torchrun) with one process
per GPU (gloo on the CPU): this machine is node 0; other machines join with `manage.py training_node`. Each
process runs `training.jobs.rank_main`, which calls the job kind's runner. Rank 0 reports to the job row as an
inline run does and writes the outcome to a file here; a rank that fails writes its error beside it, and
torchrun stops the other ranks. This process waits, and stops them too when the job is cancelled and they
did not stop on their own.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from ..kit.family_parts import RunResult
from ..kit.parallel_config import DistributedSettings
from ..kit.reporting import JobCancelled

RESULT_FILE = "result.json"
LOG_FILE = "torchrun.log"
JOINED_SUFFIX = ".joined"  # rank_<N>.joined: rank N is in the process group (every node has joined)
STOP_GRACE_SECONDS = 60.0  # after a cancel request, ranks that still run are stopped after this long
POLL_SECONDS = 0.5


class JobFailure(RuntimeError):
    """A job failed for a reason its message gives in full (its first line is what users see)."""


class DistributedJobFailed(JobFailure):
    """A rank (or torchrun itself) failed; the message names the rank and its error."""


class RendezvousTimedOut(JobFailure):
    """Not every node (or process) joined the job within TRAINING_RENDEZVOUS_TIMEOUT_SECONDS."""


def job_run(job, reporter, runner: Callable[..., RunResult]) -> RunResult:
    """The runner's result for `job`: called here for one process, else through torchrun (each rank runs
    the trainer of the job's kind from the family registry)."""
    spread = DistributedSettings.from_config(job.config)
    if spread.world_size == 1:
        return runner(job, reporter)
    return _run_distributed(job, reporter, spread)


def torchrun_command(
    spread: DistributedSettings,
    *,
    job_id: int,
    attempt: int,
    out_dir: Path,
    node_rank: int = 0,
    rendezvous_timeout: int = 600,
) -> list[str]:
    """torchrun's command line for one node of the job. One node rendezvouses on a free local port; several
    meet at master_addr:master_port (static rendezvous: node 0 is the master), waiting for each other at most
    `rendezvous_timeout` seconds."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={spread.processes}"]
    if spread.nodes == 1:
        command.append("--standalone")
    else:
        command += [
            f"--nnodes={spread.nodes}",
            f"--node-rank={node_rank}",
            f"--master-addr={spread.master_addr}",
            f"--master-port={spread.master_port}",
            f"--rdzv-conf=timeout={rendezvous_timeout}",
        ]
    command += ["--max-restarts=0", "-m", "training.jobs.rank_main", str(job_id), f"--attempt={attempt}"]
    return command + [f"--out={out_dir}"]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: torchrun gets SIGTERM when the worker that started it dies, and stops its ranks."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def torchrun_start(command: list[str], out_dir: Path) -> subprocess.Popen:
    log = open(out_dir / LOG_FILE, "wb")  # noqa: SIM115 - closed once the process ended
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    try:
        return subprocess.Popen(
            command, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec
        )
    finally:
        log.close()


def _run_distributed(job, reporter, spread: DistributedSettings) -> RunResult:
    out_dir = Path(tempfile.mkdtemp(prefix=f"rs-job{job.pk}-ranks-"))
    try:
        timeout = int(settings.TRAINING_RENDEZVOUS_TIMEOUT_SECONDS)
        command = torchrun_command(
            spread, job_id=job.pk, attempt=job.attempt, out_dir=out_dir, rendezvous_timeout=timeout
        )
        reporter.log(
            f"data-parallel: {spread.processes} process(es) per node x {spread.nodes} node(s) under torchrun"
            + (f", master {spread.master_addr}:{spread.master_port}" if spread.nodes > 1 else "")
            + f"; waiting at most {timeout} s for every {'node' if spread.nodes > 1 else 'process'} to join"
        )
        reporter.flush()  # rank 0 appends to the same log from its own process
        process = torchrun_start(command, out_dir)
        waited = _wait(process, reporter, out_dir, rendezvous_timeout=timeout)
        if waited == "rendezvous":
            raise RendezvousTimedOut(rendezvous_failure(spread, job_id=job.pk, timeout=timeout))
        return outcome_read(out_dir, process.returncode, world_size=spread.world_size, stopped=waited == "cancelled")
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def rendezvous_failure(spread: DistributedSettings, *, job_id: int, timeout: int) -> str:
    """The one-line reason of a job whose ranks never all joined."""
    if spread.nodes > 1:
        return (
            f"not all {spread.nodes} nodes joined within {timeout} s (TRAINING_RENDEZVOUS_TIMEOUT_SECONDS): run "
            f"`manage.py training_node {job_id} --node-rank N` on each other machine (N = 1..{spread.nodes - 1}) "
            "while the job waits"
        )
    return (
        f"its {spread.processes} processes did not all start within {timeout} s (TRAINING_RENDEZVOUS_TIMEOUT_SECONDS)"
    )


def joined(out_dir: Path) -> bool:
    """Whether this node's ranks are in the process group (so every node has joined)."""
    return any(out_dir.glob(f"rank_*{JOINED_SUFFIX}"))


def _wait(process: subprocess.Popen, reporter, out_dir: Path, *, rendezvous_timeout: float) -> str:
    """Wait for torchrun: "ended" when it ended by itself; "cancelled" when it was stopped here because the
    job was cancelled (at once while still at the rendezvous, else when ranks outlived the grace period);
    "rendezvous" when it was stopped because not every node joined in time."""
    started = time.monotonic()
    cancel_seen: float | None = None
    while process.poll() is None:
        time.sleep(POLL_SECONDS)
        now = time.monotonic()
        ranks_in = joined(out_dir)
        if cancel_seen is None and reporter.should_cancel():
            cancel_seen = now
        if cancel_seen is not None and (not ranks_in or now - cancel_seen > STOP_GRACE_SECONDS):
            _stop(process)
            return "cancelled"
        if not ranks_in and now - started > rendezvous_timeout:
            _stop(process)
            return "rendezvous"
    return "ended"


def _stop(process: subprocess.Popen) -> None:
    process.terminate()  # torchrun passes it on to every rank
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def outcome_read(out_dir: Path, returncode: int | None, *, world_size: int, stopped: bool = False) -> RunResult:
    """Rank 0's result, or JobCancelled, or DistributedJobFailed naming the rank that failed and why."""
    if stopped:
        raise JobCancelled("its processes were stopped after the cancel request")
    failure = failure_message(out_dir, returncode, world_size=world_size)
    if failure:
        raise DistributedJobFailed(failure)
    result_file = out_dir / RESULT_FILE
    if not result_file.exists():
        raise DistributedJobFailed(f"rank 0 left no result\ntorchrun said:\n{_log_tail(out_dir)}")
    outcome = json.loads(result_file.read_text())
    if outcome["status"] == "cancelled":
        raise JobCancelled(outcome.get("message", ""))
    return RunResult(**outcome["result"])


def failure_message(out_dir: Path, returncode: int | None, *, world_size: int) -> str | None:
    """Why this node's ranks failed, naming the rank; None when they did not."""
    errors = sorted((json.loads(p.read_text()) for p in out_dir.glob("rank_*.error.json")), key=lambda e: e["rank"])
    own = [e for e in errors if not e.get("peer_failure")]
    if own:  # a rank's own error (its collective partners then fail too; that is not news)
        first = own[0]
        return f"rank {first['rank']} of {world_size} failed on {first['host']}: {first['error']}"
    cause = root_cause(_log_tail(out_dir, lines=60))
    if returncode != 0 and cause:  # a rank died without a word (killed, out of memory): torchrun saw it
        return (
            f"rank {cause.get('rank', '?').split()[0]} of {world_size} died on {cause.get('host', '?')}: exit code "
            f"{cause.get('exitcode', '?')}; {cause.get('traceback', '')}"
        )
    if errors:  # only broken collectives here: the rank that broke them ran elsewhere
        first = errors[0]
        return (
            f"rank {first['rank']} of {world_size} lost its peers on {first['host']} (a rank on another node "
            f"failed or died; see that node's output): {first['error']}"
        )
    if returncode != 0:
        return f"a training process died (torchrun exit code {returncode})\ntorchrun said:\n{_log_tail(out_dir)}"
    return None


def root_cause(log: str) -> dict[str, str]:
    """The fields (rank, host, exitcode, traceback) of the "Root Cause" block torchrun prints when a rank
    failed; empty when there is none."""
    _, found, block = log.rpartition("Root Cause")
    if not found:
        return {}
    fields: dict[str, str] = {}
    for line in block.splitlines()[2:]:
        name, colon, value = line.partition(":")
        if not colon or not name.strip().isidentifier():
            if fields:
                break
            continue
        fields.setdefault(name.strip(), value.strip())
    return fields


def _log_tail(out_dir: Path, lines: int = 25) -> str:
    path = out_dir / LOG_FILE
    if not path.exists():
        return "(no output)"
    text = path.read_bytes()[-20_000:].decode(errors="replace")
    return "\n".join(text.strip().splitlines()[-lines:])
