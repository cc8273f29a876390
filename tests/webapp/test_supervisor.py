"""The run command's supervisor: a config generated from a Procfile by scripts/supervisor_conf.py starts
each process, restarts one that is killed, and stops them all on Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from supervisor_conf import procfile_parse, supervisor_conf  # noqa: E402

SLEEPER = "echo $$ >> {out}/{name}.pids; exec sleep 300"


def test_procfile_lines_become_programs_with_restart_and_logs(tmp_path):
    entries = procfile_parse("# comment\n\nweb: uvicorn app --port ${RS_PORT:-8000}\nworker: celery -n a@%h\n")
    assert entries == [("web", "uvicorn app --port ${RS_PORT:-8000}"), ("worker", "celery -n a@%h")]
    text = supervisor_conf(entries, root=tmp_path, data=tmp_path / "data")
    assert "[program:web]" in text and "[program:worker]" in text and "autorestart=true" in text
    assert "a@%%h" in text  # supervisor would expand a single %
    assert f"stdout_logfile={tmp_path / 'data' / 'logs' / 'web.log'}" in text
    with pytest.raises(ValueError, match="line 1"):
        procfile_parse("no colon here")


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _wait(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("timed out")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_killed_process_is_restarted_and_ctrl_c_stops_all(tmp_path):
    data = tmp_path / "data"
    (data / "logs").mkdir(parents=True)
    entries = [(name, SLEEPER.format(out=tmp_path, name=name)) for name in ("one", "two")]
    conf = data / "supervisord.conf"
    conf.write_text(supervisor_conf(entries, root=tmp_path, data=data, start_seconds=1))
    supervisord = Path(sys.executable).parent / "supervisord"
    proc = subprocess.Popen([str(supervisord), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _pids(tmp_path / "one.pids") and _pids(tmp_path / "two.pids"))
        time.sleep(1.5)  # past startsecs: the processes count as started
        first = _pids(tmp_path / "one.pids")[0]
        other = _pids(tmp_path / "two.pids")[0]
        os.kill(first, signal.SIGKILL)
        _wait(lambda: len(_pids(tmp_path / "one.pids")) == 2)
        restarted = _pids(tmp_path / "one.pids")[1]
        assert restarted != first and _alive(restarted)
        assert _alive(other) and proc.poll() is None  # the others went on
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        _wait(lambda: not _alive(restarted) and not _alive(other), 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
