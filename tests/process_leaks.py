"""Processes a test run starts and leaves behind. Every process the run starts inherits `RS_TEST_RUN` (the pytest
process's id); one that outlives its parent is re-parented away from pytest. Such an orphan (an inference worker,
a Celery worker, a web server a bench or test started and did not stop) keeps taking work from the session's
Redis and database and makes later tests flaky, so each test is checked for them after it ends, and a new run
stops those an earlier, killed run left behind."""

from __future__ import annotations

import contextlib
import os
import time

import psutil

MARKER = "RS_TEST_RUN"


def mark_this_run() -> None:
    os.environ[MARKER] = str(os.getpid())


def _run_of(process: psutil.Process) -> str | None:
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process.environ().get(MARKER)
    except (psutil.Error, OSError):
        return None


def _describe(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:160]}"
    except psutil.Error:
        return str(process.pid)


def orphans() -> list[psutil.Process]:
    """This run's processes that are no longer below the pytest process."""
    me = os.getpid()
    started = psutil.Process(me).create_time()
    found = []
    for process in psutil.process_iter(["create_time"]):
        if process.pid == me or (process.info["create_time"] or 0) < started or _run_of(process) != str(me):
            continue
        try:
            if me not in {parent.pid for parent in process.parents()}:
                found.append(process)
        except psutil.Error:
            continue
    return found


def earlier_runs_leftovers() -> list[psutil.Process]:
    """Processes marked by a test run whose pytest process is gone."""
    return [
        process
        for process in psutil.process_iter()
        if (run := _run_of(process)) is not None and run != str(os.getpid()) and not psutil.pid_exists(int(run))
    ]


def stop(processes: list[psutil.Process], grace: float = 5.0) -> list[str]:
    """Stop `processes` (SIGTERM, then SIGKILL after `grace` seconds); what each was."""
    described = [_describe(process) for process in processes]
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace)
    return described


def orphans_after(grace: float = 5.0) -> list[psutil.Process]:
    """This run's orphans still alive after `grace` seconds (a process being stopped may take a moment)."""
    deadline = time.monotonic() + grace
    found = orphans()
    while found and time.monotonic() < deadline:
        time.sleep(0.2)
        found = [process for process in found if process.is_running() and _run_of(process) is not None]
    return found
