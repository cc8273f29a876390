"""Live sockets stay up: the job page's and the teleop dashboard's WebSockets, held open against the real app
(uvicorn and the Channels Redis layer), are never closed by the server while idle, and nothing is logged.

They used to close every 10 s with a Redis "Timeout reading" traceback: redis-py's default socket timeout (5 s)
was no longer than channels_redis's blocking receive (a 5 s BZPOPMIN), so an idle socket's receive gave up as
Redis answered, twice with the retry (common/redis_clients.py, CHANNEL_LAYER_SOCKET_TIMEOUT_S)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import websockets
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.conf import settings
from django.test import Client

from common.redis_clients import CHANNEL_LAYER_BLOCKING_READ_S, CHANNEL_LAYER_SOCKET_TIMEOUT_S
from inference.teleop.models import TeleopSession
from inference.teleop.stream import group_name
from projects.services import agent_create
from tests.conftest import ARTIFACTS
from tests.training.conftest import seed_episodes
from training.jobs.reporter import job_group
from training.services import job_create
from training.snapshots.services import snapshot_create

HOLD_S = 60.0


def test_the_layer_socket_timeout_outlasts_the_installed_layers_blocking_receive():
    assert RedisChannelLayer.brpop_timeout == CHANNEL_LAYER_BLOCKING_READ_S
    host = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]
    assert host["socket_timeout"] == CHANNEL_LAYER_SOCKET_TIMEOUT_S > RedisChannelLayer.brpop_timeout + 5


async def _hold(url: str, cookie: str, groups: dict[str, dict]) -> dict[str, list[str]]:
    """Open a socket per path, hold them HOLD_S while idle, then send one event to each one's group: what each
    received. Any close before the test closes them fails the test, with when it came."""
    headers = {"Cookie": cookie, "Origin": url}
    ws_url = url.replace("http://", "ws://")
    sockets = {path: await websockets.connect(ws_url + path, additional_headers=headers) for path in groups}
    received: dict[str, list[str]] = {path: [] for path in groups}
    closes: list[str] = []
    started = time.monotonic()

    async def listen(path: str, socket) -> None:
        try:
            async for message in socket:
                received[path].append(message)
        except websockets.ConnectionClosed:
            pass
        if socket.close_code is not None and not ending.is_set():
            closes.append(f"{path} closed with {socket.close_code} after {time.monotonic() - started:.1f} s")

    ending = asyncio.Event()
    listeners = [asyncio.create_task(listen(path, socket)) for path, socket in sockets.items()]
    await asyncio.sleep(HOLD_S)
    layer = get_channel_layer()
    for path, event in groups.items():
        await layer.group_send(path_group(path), event)
    await asyncio.sleep(2)
    ending.set()
    for socket in sockets.values():
        await socket.close()
    await asyncio.gather(*listeners)
    assert closes == []
    return received


def path_group(path: str) -> str:
    number = int(path.rstrip("/").rsplit("/", 1)[1])
    return job_group(number) if path.startswith("/ws/jobs/") else group_name(number)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_job_and_teleop_sockets_stay_open_for_a_minute_with_nothing_logged(live_server_url, project, user):
    seed_episodes(project, episodes=3, steps=6, windows=False)
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "trend": False, "png_folders": False})
    job = job_create(project=project, snapshot=snapshot, config={"epochs": 1}, enqueue=False)
    agent, _ = agent_create(name=f"teleop-{uuid.uuid4().hex[:6]}", kind="sim", scopes=["teleop"], all_projects=True)
    session = TeleopSession.objects.create(agent=agent, project=project)
    client = Client()
    client.force_login(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    port = live_server_url.rsplit(":", 1)[1]
    log = ARTIFACTS / f"uvicorn-{port}.log"
    logged_before = log.stat().st_size

    job_path, teleop_path = f"/ws/jobs/{job.pk}/", f"/ws/teleop/sessions/{session.pk}/"
    events = {
        job_path: {"type": "job.event", "message": {"event": "status", "status": "cancelled"}},
        teleop_path: {"type": "teleop.event", "data": {"type": "stats", "after": HOLD_S}},
    }
    received = asyncio.run(_hold(live_server_url, cookie, events))

    assert '"event": "history"' in received[job_path][0]
    assert received[job_path][-1] == '{"event": "status", "status": "cancelled"}'  # still in its group
    assert '"type": "snapshot"' in received[teleop_path][0]
    assert received[teleop_path][-1] == '{"type": "stats", "after": 60.0}'
    with log.open() as handle:
        handle.seek(logged_before)
        logged = handle.read()
    assert "Traceback" not in logged and "Timeout reading" not in logged, logged[-3000:]
