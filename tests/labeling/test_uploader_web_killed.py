"""Done-when of "an uploader that never loses data": robot_agent's IngestClient uploads an episode to a real
uvicorn that is killed (`kill -9`) in the middle and restarted on the same port. The client retries
through the outage (connection refused while no server listens), never takes the lost chunk for stored,
and the episode ends finished with every step and frame stored exactly once. Uploading it again with the
same UUID asks the server what it has and sends nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from django.db.models import Count

from labeling.models import Episode, Frame, Step
from robot_agent.uploader import IngestClient
from tests.conftest import _spawn, _stop, _wait_for_port, _warm_up, free_port

from .ingest_helpers import png_bytes, step_rows

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEPS = 200
CHUNK = 10
KILL_AFTER_STEPS = 40


def serve(port: int, process_env: dict, name: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1"]
    args += ["--port", str(port), "--no-proxy-headers", "--log-level", "warning"]
    proc = _spawn(args, process_env, f"uvicorn-uploader-{name}-{port}.log")
    try:
        _wait_for_port(port, proc)
        _warm_up(f"http://127.0.0.1:{port}")
    except BaseException:
        _stop(proc)
        raise
    return proc


class CountingClient(IngestClient):
    """The real client; counts the connection errors it met and the chunks it sent, and paces its chunks a
    little so that the kill lands in the middle of the upload."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.connection_errors = 0
        self.chunks_sent = 0

    def _send(self, method, path, body, headers):
        try:
            return super()._send(method, path, body, headers)
        except OSError:
            self.connection_errors += 1
            raise

    def append_steps(self, episode, steps, images):
        self.chunks_sent += 1
        time.sleep(0.05)
        return super().append_steps(episode, steps, images)


def test_an_upload_through_a_killed_and_restarted_server_stores_every_step_exactly_once(
    agent_token, project, process_env
):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    episode_id = str(uuid.uuid4())
    steps = step_rows(range(STEPS))
    images = [{"main": png_bytes(i, 32), "extra": png_bytes(i + 7, 32)} for i in range(STEPS)]
    client = CountingClient(url, agent_token[1], retries=40, backoff_s=0.1, max_backoff_s=1.0, timeout=30)
    outcome: list[BaseException | str] = []

    def upload() -> None:
        try:
            outcome.append(client.upload_episode(project.name, steps, images, chunk_steps=CHUNK, episode=episode_id))
        except BaseException as exc:
            outcome.append(exc)

    server = serve(port, process_env, "first")
    restarted = None
    thread = threading.Thread(target=upload)
    try:
        thread.start()
        deadline = time.monotonic() + 60
        while Step.objects.filter(episode__uuid=episode_id).count() < KILL_AFTER_STEPS:
            assert time.monotonic() < deadline and thread.is_alive(), "the upload never got going"
            time.sleep(0.01)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
        stored_at_kill = Step.objects.filter(episode__uuid=episode_id).count()
        time.sleep(1.0)  # nothing listens: the client meets refused connections and keeps retrying
        restarted = serve(port, process_env, "restarted")
        thread.join(120)
        assert not thread.is_alive(), "the upload did not finish after the restart"
        assert outcome == [episode_id], outcome
        assert stored_at_kill < STEPS and client.connection_errors >= 1  # the kill landed mid-upload

        episode = Episode.objects.get(uuid=episode_id)
        assert episode.status == Episode.Status.FINISHED and episode.num_steps == STEPS
        indices = list(Step.objects.filter(episode=episode).order_by("index").values_list("index", flat=True))
        assert indices == list(range(STEPS))  # every step, none twice
        per_step = Frame.objects.filter(step__episode=episode).values("step_id").annotate(n=Count("id"))
        assert len(per_step) == STEPS and {row["n"] for row in per_step} == {2}

        # the same upload again (an agent restarted after a crash): it asks, finds everything, sends nothing
        again = CountingClient(url, agent_token[1], retries=0)
        assert again.stored_ranges(episode_id) == [(0, STEPS - 1)]
        assert again.upload_episode(project.name, steps, images, chunk_steps=CHUNK, episode=episode_id) == episode_id
        assert again.chunks_sent == 0
    finally:
        for proc in (server, restarted):
            if proc is not None and proc.poll() is None:
                _stop(proc)
    assert Step.objects.filter(episode__uuid=episode_id).count() == STEPS
