"""The check that no test leaves a process running on its own (tests/process_leaks.py)."""

from __future__ import annotations

import subprocess

import psutil

from tests import process_leaks


def test_a_process_left_behind_by_its_parent_is_found_and_stopped():
    # sh starts sleep in the background and exits: sleep is re-parented away from pytest, still marked.
    out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True)
    pid = int(out.stdout)
    assert pid in [process.pid for process in process_leaks.orphans()]
    assert process_leaks.stop([psutil.Process(pid)], grace=2)
    assert pid not in [process.pid for process in process_leaks.orphans_after(grace=0)]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_child_still_below_pytest_is_not_an_orphan():
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert child.pid not in [process.pid for process in process_leaks.orphans()]
    finally:
        child.kill()
        child.wait()
