"""Done-when of "nothing lost to a fault", web process: a real uvicorn serving the ingest API is killed
(`kill -9`) while it handles a chunk. The client's request fails at once with a connection error (it does
not hang until its timeout), the chunk is stored all or nothing, and the agent's retry of it against a
restarted server stores every step and frame exactly once (no frame file left without its row)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
import requests
from django.core.files.storage import default_storage
from django.db import transaction

from labeling.models import Episode, Frame, Step
from tests.conftest import _spawn, _stop, _wait_for_port, _warm_up, free_port
from tests.waiting import wait_until

from .ingest_helpers import multipart_chunk, png_bytes

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLIENT_TIMEOUT_S = 30.0
FAILS_WITHIN_S = 2.0
STEPS = 40
SIZE = 128  # 80 frames of ~48 KB: their writes take long enough to kill the server in the middle


class Server:
    def __init__(self, process_env):
        port = free_port()
        args = [sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1"]
        args += ["--port", str(port), "--no-proxy-headers", "--log-level", "warning"]
        self.proc: subprocess.Popen = _spawn(args, process_env, f"uvicorn-killed-{port}.log")
        self.url = f"http://127.0.0.1:{port}"
        try:
            _wait_for_port(port, self.proc)
            _warm_up(self.url)
        except BaseException:
            _stop(self.proc)
            raise

    def kill(self) -> float:
        os.kill(self.proc.pid, signal.SIGKILL)  # no clean-up of any kind
        killed_at = time.monotonic()
        self.proc.wait(timeout=10)
        return killed_at

    def stop(self) -> None:
        if self.proc.poll() is None:
            _stop(self.proc)


class Upload:
    """One chunk posted from a thread, as an agent would; `outcome` is the response or the exception."""

    def __init__(self, url: str, token: str, episode_id: str, indices):
        self.outcome: requests.Response | Exception | None = None
        self.ended_at = 0.0
        chunk = multipart_chunk(indices, size=SIZE)
        steps = chunk.pop("steps")
        files = {name: (name, value.getvalue()) for name, value in chunk.items()}

        def post() -> None:
            try:
                self.outcome = requests.post(
                    f"{url}/api/episodes/{episode_id}/steps",
                    data={"steps": steps},
                    files=files,
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=CLIENT_TIMEOUT_S,
                )
            except requests.RequestException as exc:
                self.outcome = exc
            self.ended_at = time.monotonic()

        self.thread = threading.Thread(target=post)
        self.thread.start()

    def wait(self) -> requests.Response | Exception | None:
        self.thread.join(CLIENT_TIMEOUT_S + 5)
        return self.outcome


def _frame_files(project, episode_id: str) -> list[Path]:
    folder = Path(default_storage.path(f"frames/{project.pk}/{episode_id}"))
    return sorted(folder.iterdir()) if folder.exists() else []


def _backends(database_url: str, where: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend' " + where
        ).fetchone()
        return row[0] if row else 0


def _episode(agent_client, project) -> str:
    episode_id = str(uuid.uuid4())
    body = {"project": project.name, "uuid": episode_id, "env_id": "PickCube-v1"}
    assert agent_client.post("/api/episodes", body, format="json").status_code == 201
    return episode_id


def test_a_request_in_flight_to_a_killed_server_fails_at_once_and_writes_nothing(
    agent_client, agent_token, project, process_env
):
    episode_id = _episode(agent_client, project)
    database_url = process_env["DATABASE_URL"]
    server = Server(process_env)
    try:
        with transaction.atomic():  # the episode's row lock: the server's chunk waits for it, in flight
            Episode.objects.select_for_update().get(uuid=episode_id)
            upload = Upload(server.url, agent_token[1], episode_id, range(STEPS))
            wait_until(
                lambda: _backends(database_url, "AND wait_event_type = 'Lock'"),
                60,
                "the chunk to wait for the lock",
                0.01,
            )
            killed_at = server.kill()
            outcome = upload.wait()
        assert isinstance(outcome, requests.ConnectionError), outcome
        assert upload.ended_at - killed_at < FAILS_WITHIN_S  # the client knows at once; its timeout is 30 s
    finally:
        server.stop()
    # the dead server's database session ends once it got the lock and found its client gone
    wait_until(
        lambda: not _backends(database_url, "AND state <> 'idle'"), 10, "the dead server's transaction to end", 0.01
    )
    assert not Step.objects.filter(episode__uuid=episode_id).exists()
    assert Episode.objects.get(uuid=episode_id).num_steps == 0
    assert not _frame_files(project, episode_id)


def test_a_chunk_whose_server_was_killed_while_writing_is_stored_once_when_retried(
    agent_client, agent_token, project, process_env
):
    episode_id = _episode(agent_client, project)
    token = agent_token[1]
    server = Server(process_env)
    try:
        upload = Upload(server.url, token, episode_id, range(STEPS))
        wait_until(lambda: _frame_files(project, episode_id), 60, "the server to write the chunk's first frame", 0.0005)
        killed_at = server.kill()
        outcome = upload.wait()
        assert upload.ended_at - killed_at < FAILS_WITHIN_S
    finally:
        server.stop()
    # all or nothing: the kill landed while the frames were written (the usual case: no step stored, some
    # frame files left) or, rarely, after the commit (every step stored and the client answered)
    stored = Step.objects.filter(episode__uuid=episode_id).count()
    if isinstance(outcome, requests.Response):
        assert outcome.status_code == 200 and stored == STEPS
    else:
        assert isinstance(outcome, requests.ConnectionError), outcome
        assert stored in (0, STEPS)

    server = Server(process_env)  # restarted; the agent sends the chunk again, twice (a retry of the retry)
    try:
        first = Upload(server.url, token, episode_id, range(STEPS)).wait()
        again = Upload(server.url, token, episode_id, range(STEPS)).wait()
    finally:
        server.stop()
    assert isinstance(first, requests.Response) and first.status_code == 200, first
    assert first.json() == {"created": STEPS - stored, "skipped": stored, "num_steps": STEPS}
    assert isinstance(again, requests.Response) and again.json()["created"] == 0

    assert Step.objects.filter(episode__uuid=episode_id).count() == STEPS
    frames = Frame.objects.filter(step__episode__uuid=episode_id)
    files = _frame_files(project, episode_id)
    assert frames.count() == len(files) == 2 * STEPS
    assert sorted(Path(default_storage.path(f.image.name)) for f in frames) == files
    step_3_main = frames.get(step__index=3, camera="main")
    assert Path(default_storage.path(step_3_main.image.name)).read_bytes() == png_bytes(3 * 10 + len("main"), SIZE)
