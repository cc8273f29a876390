"""The Procfile's web line runs two web processes under uvicorn's parent (bench/web_kill.py kills one under
reward clients). Killed with SIGKILL, the parent takes its web processes with it (common.parent_death):
they once stayed as orphans holding the port, so supervisord's new parent could not bind it."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, _spawn, _stop, _wait_for_port, free_port

sys.path.insert(0, str(ROOT / "scripts"))
from supervisor_conf import procfile_parse  # noqa: E402

pytestmark = pytest.mark.slow


def children(parent: int) -> list[int]:
    """The processes whose parent is `parent` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_killed_web_parent_takes_its_web_processes_and_the_port_is_free_again(process_env):
    web = dict(procfile_parse((ROOT / "Procfile").read_text()))["web"]
    port = free_port()
    env = {**process_env, "RS_HOST": "127.0.0.1", "RS_PORT": str(port), "RS_WEB_PROCESSES": "2"}
    env["PATH"] = f"{os.path.dirname(sys.executable)}:{env['PATH']}"
    proc = _spawn(["bash", "-c", f"exec {web}"], env, f"web-parent-{port}.log")
    workers: list[int] = []
    try:
        _wait_for_port(port, proc, timeout=120)
        deadline = time.monotonic() + 60
        while (
            len(workers := [p for p in children(proc.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()])
            < 2
        ):
            assert time.monotonic() < deadline, "uvicorn did not start two web processes"
            time.sleep(0.2)
        time.sleep(3)  # the web processes have imported the app (and asked to end with their parent)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in workers):
            assert time.monotonic() < deadline, f"web processes {workers} outlived their parent"
            time.sleep(0.2)
        with socket.socket() as sock:  # what supervisord's new parent does first
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
    finally:
        if proc.poll() is None:
            _stop(proc)
        for pid in workers:  # an orphan left by a failed check: not for the next test to meet
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
