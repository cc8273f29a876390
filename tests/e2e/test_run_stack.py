"""The whole stack as the run command starts it: every Procfile process under supervisord, with the data folder
outside the checkout. Each one comes up (supervisord says RUNNING and /healthz finds it), a killed beat is
restarted, and a beat that stays down is reported by /healthz (503) and named by the banner on every page.

The stack gets a Redis database of its own, so that what /healthz finds is what these processes stamped, not
the session's worker; it shares the test's PostgreSQL database (the login below is the test's user)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import requests

from scripts.supervisor_conf import procfile_parse, supervisor_conf
from tests.conftest import ARTIFACTS, ROOT, free_port, own_redis_url

pytestmark = pytest.mark.django_db(transaction=True)

PROCFILE = ROOT / "Procfile"
HEARTBEAT_S = 1  # beat's heartbeat and the workers' stamps: a process that stops reads as down within 3 s


class Stack:
    def __init__(self, data: Path, port: int, env: dict):
        self.data, self.env = data, env
        self.conf = data / "supervisord.conf"
        self.base = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        text = supervisor_conf(procfile_parse(PROCFILE.read_text()), root=ROOT, data=self.data)
        (self.data / "logs").mkdir(parents=True)
        self.conf.write_text(text)
        supervisord = Path(sys.executable).parent / "supervisord"
        self.proc = subprocess.Popen([str(supervisord), "-c", str(self.conf)], cwd=ROOT, env=self.env)

    def ctl(self, *args: str) -> str:
        supervisorctl = Path(sys.executable).parent / "supervisorctl"
        done = subprocess.run(
            [str(supervisorctl), "-c", str(self.conf), *args], capture_output=True, text=True, timeout=60
        )
        return done.stdout

    def states(self) -> dict[str, str]:
        """{program: RUNNING / STARTING / BACKOFF / STOPPED / FATAL ...} as supervisorctl reports them."""
        return dict(re.findall(r"^(\S+)\s+([A-Z]+)", self.ctl("status"), re.M))

    def health(self) -> tuple[int, dict]:
        response = requests.get(f"{self.base}/healthz", timeout=30)
        return response.status_code, response.json()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)  # Ctrl-C, as a user stops the run command
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-1500:]}" for log in sorted(self.data.glob("logs/*.log")))


def _wait(predicate, timeout: float, what: str, stack: Stack):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (requests.RequestException, ValueError):
            value = None
        if value:
            return value
        assert stack.proc is not None and stack.proc.poll() is None, f"supervisord exited\n{stack.logs()}"
        time.sleep(0.5)
    raise AssertionError(f"{what} not within {timeout} s: {stack.ctl('status')}\n{stack.logs()}")


@pytest.fixture
def stack(process_env, tmp_path, user):
    data = tmp_path / "elsewhere" / "data"  # the run command's RS_DATA_DIR, not ./data in the checkout
    assert ROOT not in data.parents
    url = own_redis_url(process_env.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    redis.Redis.from_url(url).flushdb()
    env = {
        **process_env,
        "RS_DATA_DIR": str(data),
        "RS_PORT": str(free_port()),
        "REDIS_URL": url,
        "CELERY_BROKER_URL": url,
        "CELERY_RESULT_BACKEND": url,
        "INFERENCE_METRICS_PORT": str(free_port()),
        "HEARTBEAT_SECONDS": str(HEARTBEAT_S),
        "HEALTH_BANNER_CACHE_SECONDS": "0",
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    running = Stack(data, int(env["RS_PORT"]), env)
    running.start()
    yield running
    running.stop()
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "run-stack.log").write_text(running.logs())
    redis.Redis.from_url(url).flushdb()


def _login(base: str) -> requests.Session:
    session = requests.Session()
    session.get(f"{base}/accounts/login/", timeout=30)
    response = session.post(
        f"{base}/accounts/login/",
        data={"username": "alice", "password": "pw-alice-123", "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        timeout=30,
    )
    assert response.status_code == 200 and response.url.rstrip("/") == base, response.url
    return session


def test_every_procfile_process_runs_with_the_data_elsewhere_and_a_stopped_beat_is_reported(stack):
    programs = [name for name, _ in procfile_parse(PROCFILE.read_text())]
    assert set(programs) >= {"web", "worker", "training", "beat", "inference"}

    # every program started and stayed up past supervisord's startsecs
    _wait(
        lambda: set(stack.states().values()) == {"RUNNING"} and len(stack.states()) == len(programs),
        180,
        "every program RUNNING",
        stack,
    )
    assert sorted(stack.states()) == sorted(programs)
    # and each one is seen doing its work: the workers and beat stamped Redis, the inference worker registered
    code, body = _wait(lambda: (h := stack.health())[0] == 200 and h, 120, "/healthz ok", stack)
    assert body["processes"] == {
        "ok": True,
        "web": True,
        "worker": True,
        "training": True,
        "beat": True,
        "inference": True,
    }
    # what they write went to the data folder: beat's schedule, every process's log
    assert list(stack.data.glob("celerybeat-schedule*"))
    assert all((stack.data / "logs" / f"{name}.log").stat().st_size for name in programs)

    # a killed beat is started again by supervisord
    first = int(stack.ctl("pid", "beat").strip())
    os.kill(first, signal.SIGKILL)
    _wait(
        lambda: (pid := stack.ctl("pid", "beat").strip()).isdigit() and int(pid) not in (0, first),
        60,
        "beat restarted",
        stack,
    )

    # a beat that stays down: /healthz answers 503 naming it, the banner on every page says so, the rest is up
    stack.ctl("stop", "beat")
    assert stack.states()["beat"] == "STOPPED"
    code, body = _wait(lambda: (h := stack.health())[0] == 503 and h, 3 * HEARTBEAT_S + 10, "beat down", stack)
    assert body["processes"] == {
        "ok": False,
        "web": True,
        "worker": True,
        "training": True,
        "beat": False,
        "inference": True,
    }
    page = _login(stack.base).get(f"{stack.base}/", timeout=30).text
    assert "Down: Celery beat." in page

    # started again, it is found again
    stack.ctl("start", "beat")
    _wait(lambda: stack.health()[0] == 200, 60, "beat back", stack)
