"""Shared fixtures: people, agents, projects, and the real processes (ASGI server, Celery worker,
Chromium) that end-to-end tests talk to. Processes run against the same PostgreSQL test database as
the test, so tests that use them need `@pytest.mark.django_db(transaction=True)` (data committed)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest

from tests import process_leaks
from tests.browser import login  # noqa: F401 - the browser tests import it from here

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
# Tests and the processes they start never read the settings a running app's scripts/run.sh wrote.
os.environ["RS_RUN_ENV"] = ""
# Stored files of a test run go to a scratch folder, shared with the processes the tests start.
TEST_MEDIA_ROOT = os.environ.setdefault("MEDIA_ROOT", tempfile.mkdtemp(prefix="rs-test-media-"))
# Model files a job may name (MODEL_DIR) likewise: jobs' paths are confined to it, in every process.
TEST_MODEL_DIR = os.environ.setdefault("MODEL_DIR", tempfile.mkdtemp(prefix="rs-test-models-"))
# The tests' webhook receivers listen on loopback; the tests of the refusal turn this off themselves.
os.environ.setdefault("WEBHOOK_ALLOW_PRIVATE_TARGETS", "1")
# Every process the run starts carries the run's mark, so that one left behind is found (tests/process_leaks.py).
process_leaks.mark_this_run()


@pytest.fixture(autouse=True, scope="session")
def _no_leftovers_of_earlier_runs():
    """Processes a killed earlier run left (an inference worker taking this run's requests) are stopped first."""
    stopped = process_leaks.stop(process_leaks.earlier_runs_leftovers())
    if stopped:
        print(f"stopped processes an earlier test run left behind: {stopped}", file=sys.stderr)
    yield


@pytest.fixture(autouse=True)
def _no_orphan_processes():
    """A test leaves no process it started running on its own: it is stopped, and the test errors naming it."""
    yield
    left = process_leaks.orphans_after()
    if left:
        pytest.fail(f"the test left processes running (now stopped): {process_leaks.stop(left)}", pytrace=False)


@pytest.fixture(autouse=True, scope="session")
def _test_media_root():
    from django.conf import settings

    settings.MEDIA_ROOT = TEST_MEDIA_ROOT
    settings.MODEL_DIR = Path(TEST_MODEL_DIR).resolve()
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = os.environ["WEBHOOK_ALLOW_PRIVATE_TARGETS"] == "1"
    yield


SESSION_WORKER: list[subprocess.Popen] = []  # the session's Celery worker, once a test started it


def _purge_celery_queues() -> None:
    """Drop the task messages a test left waiting, so that the session's worker does not run them during the
    next test (on rows the flush is removing)."""
    import redis
    from django.conf import settings

    names = [getattr(settings, f"CELERY_QUEUE_{kind}") for kind in ("INGEST", "TRAINING", "INFERENCE", "DEFAULT")]
    keys = [key for name in names for key in (name, *(f"{name}\x06\x16{p}" for p in range(1, 10)))]
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.delete(*keys)
    finally:
        client.close()


def _wait_for_the_worker_to_finish(timeout: float = 30.0) -> None:
    """Until the session's Celery worker answers a ping: with `--pool solo` it answers only between tasks, so
    the task a test left running has finished (and, the queues purged, no other starts)."""
    if not SESSION_WORKER or SESSION_WORKER[0].poll() is not None:
        return
    from webapp.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not app.control.ping(timeout=1.0, limit=1):
        pass


def _wait_for_other_transactions(connection, timeout: float = 10.0) -> None:
    """Until no other client of the test database is inside a transaction: a worker or server process still
    finishing what the test started would otherwise hold row locks that the flush's TRUNCATE then waits for
    while the other side waits for a table the TRUNCATE already holds (a deadlock)."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND xact_start IS NOT NULL"
            )
            if not cursor.fetchone()[0] or time.monotonic() > deadline:
                return
            time.sleep(0.05)


@pytest.fixture(autouse=True)
def _fresh_channel_layer():
    """Each test gets its own channel layer instance. The Redis layer keeps per-channel asyncio locks that
    bind to the event loop of the test that first waited on them; a consumer cancelled with its loop can
    leave one held, and the next test's loop would then fail on it ("bound to a different event loop")."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture(autouse=True)
def _database_threads_disconnected():
    """Threads that keep their database connection (common.db_bridge: the teleop consumers', in this
    process) close it after each test, so that none is open when the test database is dropped."""
    yield
    from common.db_bridge import close_all_connections

    close_all_connections()


@pytest.fixture(autouse=True, scope="session")
def _flush_after_background_work():
    """Transactional tests end with a flush (TRUNCATE of every table) while the session's real processes
    (the Celery worker, inference workers, the live server's writer threads, the monitor's timed checks)
    may still be finishing work a test started. PostgreSQL then sometimes picks the flush as a deadlock's
    victim, and every later test inherits the rows it failed to remove. So before the flush the Celery
    queues are emptied, the session's worker is waited for until it is between tasks, and every other
    client of the database until none is inside a transaction (a few ms when all is quiet). What can still
    start in between (a timer, a request) is rare; a flush that loses a deadlock to it is retried."""
    from django.db.backends.postgresql.operations import DatabaseOperations
    from django.db.utils import OperationalError

    flush = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        _purge_celery_queues()
        _wait_for_the_worker_to_finish()
        _wait_for_other_transactions(self.connection)
        for attempt in range(5):
            try:
                return flush(self, sql_list)
            except OperationalError as exc:
                if "deadlock detected" not in str(exc) or attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))

    DatabaseOperations.execute_sql_flush = execute_sql_flush
    yield
    DatabaseOperations.execute_sql_flush = flush


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("alice", password="pw-alice-123")


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("admin", "admin@example.com", "pw-admin-123")


@pytest.fixture
def user_client(client, user):
    client.force_login(user)
    return client


@pytest.fixture
def project(db, user):
    """A project with `user` (alice) as its manager, so she may do everything in it.

    Access control: people see only projects they are members of (projects.access). For narrower roles
    use `member_client(role)` below."""
    from projects.models import Membership, Project

    project = Project.objects.create(name="PickCube", task_description="Pick up the red cube.")
    Membership.objects.create(project=project, user=user, role=Membership.Role.MANAGER)
    return project


@pytest.fixture
def agent_token(db):
    """(agent, token) for an agent with every scope on every project and deployment (`all_projects`), so
    tests of other features need not care about token scopes. For least-privilege tokens use
    `scoped_agent_client(...)` below."""
    from projects.access import ALL_SCOPES
    from projects.services import agent_create

    return agent_create(name="sim-agent-1", kind="sim", scopes=ALL_SCOPES, all_projects=True)


@pytest.fixture
def member_client(db, django_user_model):
    """member_client(project, role) -> a Django test client logged in as a new member with that role."""
    from django.test import Client

    from projects.models import Membership

    def make(project, role: str):
        person = django_user_model.objects.create_user(f"{role}-{project.pk}", password="pw-member-123")
        Membership.objects.create(project=project, user=person, role=role)
        client = Client()
        client.force_login(person)
        return client

    return make


@pytest.fixture
def scoped_agent_client(db):
    """scoped_agent_client(scopes, projects=(), deployments=()) -> (agent, APIClient with its token)."""
    from rest_framework.test import APIClient

    from projects.services import agent_create

    made = []

    def make(scopes, projects=(), deployments=()):
        agent, token = agent_create(
            name=f"scoped-{len(made)}", kind="sim", scopes=list(scopes), projects=projects, deployments=deployments
        )
        made.append(agent)
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return agent, api

    return make


@pytest.fixture
def agent_client(agent_token):
    from rest_framework.test import APIClient

    agent, token = agent_token
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early with code {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on port {port} after {timeout}s")


@pytest.fixture(scope="session")
def process_env(django_db_setup, django_db_blocker):
    """Environment for child processes: same settings, pointed at the test database. At the end of the
    session, nothing is left connected to that database (so that it can be dropped)."""
    from django.db import connection

    with django_db_blocker.unblock():
        db = connection.settings_dict
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    if db["ENGINE"].endswith("postgresql"):
        env["DATABASE_URL"] = (
            f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        )
    else:
        env["DATABASE_URL"] = f"sqlite:///{db['NAME']}"
    env["PYTHONUNBUFFERED"] = "1"
    yield env
    # The processes that used it are stopped by now; what is still connected (one of this process's
    # background threads: the deployment-settings refresher, the reward monitor) would make dropping the
    # test database fail with "being accessed by other users".
    if db["ENGINE"].endswith("postgresql"):
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


def own_redis_url(url: str) -> str:
    """Another database number on the test's Redis server, for a stack of processes of a test's own: the
    session's workers (`celery_worker_process`, `inference_worker_process`, on REDIS_URL) take every queued
    task and serve every deployment, and would answer for the test's processes with the session's settings."""
    parts = urllib.parse.urlsplit(url)
    number = int(parts.path.strip("/") or 0)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{13 if number != 13 else 12}"))


def _spawn(args: list[str], env: dict, log_name: str) -> subprocess.Popen:
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / log_name, "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _warm_up(base_url: str) -> None:
    """Django loads the URL conf (and with it torch) on a process's first request: pay that here, not inside
    a browser's 30 s navigation timeout."""
    import contextlib
    import urllib.request

    # a 503 (no inference worker yet) still loaded the URL conf
    with contextlib.suppress(OSError):
        urllib.request.urlopen(f"{base_url}/healthz", timeout=180).close()


@pytest.fixture(scope="session")
def live_server_url(process_env):
    """A real ASGI server (uvicorn: HTTP + WebSockets) on a free port."""
    port = free_port()
    proc = _spawn(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "webapp.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-proxy-headers",  # as the Procfile: FORWARDED_ALLOW_IPS alone decides whose header counts
            "--log-level",
            "warning",
        ],
        process_env,
        f"uvicorn-{port}.log",
    )
    try:
        _wait_for_port(port, proc)
        _warm_up(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def celery_worker_process(process_env):
    """A real Celery worker on Redis taking every queue, one task at a time."""
    proc = _spawn(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "webapp",
            "worker",
            "-Q",
            "ingest,training,inference,default",
            "--pool",
            "solo",
            "--concurrency",
            "1",
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
        ],
        process_env,
        "celery-worker.log",
    )
    time.sleep(0.5)
    if proc.poll() is not None:
        raise RuntimeError("celery worker exited at start; see artifacts/celery-worker.log")
    SESSION_WORKER.append(proc)
    yield proc
    SESSION_WORKER.clear()
    _stop(proc)


@pytest.fixture(scope="session")
def inference_worker_process(process_env):
    """A real `manage.py inference_worker` (one torch thread) on the test database and Redis; its Prometheus
    metrics at `proc.metrics_url`. Defined here, once: a fixture imported into several modules would be a fixture
    of each, and start a worker for each."""
    metrics_port = free_port()
    proc = _spawn(
        [sys.executable, "manage.py", "inference_worker", "--threads", "1", "--metrics-port", str(metrics_port)],
        process_env,
        "inference-worker.log",
    )
    proc.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    import redis
    from django.conf import settings

    from inference.broker import WORKERS_KEY

    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(WORKERS_KEY)
    deadline = time.monotonic() + 120
    while not client.hlen(WORKERS_KEY):  # its first heartbeat: torch imported, listening
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise RuntimeError(f"inference worker did not start; see {ROOT / 'artifacts' / 'inference-worker.log'}")
        time.sleep(0.2)
    yield proc
    _stop(proc)


@pytest.fixture
def browser():
    """Debian's Chromium, headless, driven by Playwright.

    One per test: Playwright's sync API runs an asyncio loop in the main thread while it is open, which
    would break the asyncio tests (Channels communicators) that pytest runs after it.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def screenshot_dir() -> Path:
    path = ARTIFACTS / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def vlm_fixture_dir() -> Path:
    """A tiny random-weight Qwen3-VL saved with save_pretrained (loads like a downloaded model folder), in
    the session's MODEL_DIR."""
    from training.vlm.fixture import build_tiny_qwen3_vl

    return build_tiny_qwen3_vl(Path(tempfile.mkdtemp(prefix="qwen3-vl-tiny-", dir=TEST_MODEL_DIR)))
