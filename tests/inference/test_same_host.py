"""Same-host frames (inference/shm/frames.py, reward_client/shm.py) against the real stack: the ASGI server, Redis
and a real inference worker process, with RL clients in this process and in a subprocess killed mid-request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests

from reward_client import RewardClient
from tests.conftest import ROOT
from tests.inference.conftest import deploy, direct_probabilities, make_trained_model, random_images

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def rl_token(db):
    from projects.services import agent_create

    return agent_create(name="rl-same-host", kind="rl_worker", all_projects=True)[1]


def _memfd_holders(name_part: str) -> list[str]:
    """`pid:fd` of every process of ours holding a memfd whose name contains `name_part`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if name_part in os.readlink(f"/proc/{pid}/fd/{fd}"):
                    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                        found.append(f"{pid}:{fd} {cmdline.read()[:200]!r}")
            except OSError:
                continue
    return found


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as maps:
        return maps.read()


def _inference_workers_mapping(name: str) -> list[int]:
    """Inference worker processes with a mapping of the memfd `name`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"inference_worker" in cmdline.read() and name in _maps(int(pid)):
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _wait_until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time given"
        time.sleep(0.05)


def test_the_same_frames_through_http_and_shared_memory_get_identical_rewards(
    project, rl_token, live_server_url, inference_worker_process
):
    model = make_trained_model(project, seed=11)
    per_step = deploy(model, reward_type="soft", env_reward_weight=0.5, reward_weight=2.0)
    terminal = deploy(model, reward_mode="terminal", threshold=0.0, reward_weight=3.0)  # some items only
    images = random_images(12, seed=5)
    env = np.linspace(-1, 1, 12)
    dones = [i % 3 == 2 for i in range(12)]
    for deployment in (per_step, terminal):
        over_http = RewardClient(live_server_url, rl_token, deployment.name, transport="http")
        over_shm = RewardClient(live_server_url, rl_token, deployment.name, transport="shm")
        a = over_http.compute_rewards(images, env_rewards=env, dones=dones)
        b = over_shm.compute_rewards(images, env_rewards=env, dones=dones)
        assert (over_http.transport_used, over_shm.transport_used) == ("http", "shm")
        assert a.items == b.items
        buffer = over_shm.frames_buffer(images.shape)  # frames written in place: sent with no copy
        buffer[:] = images
        assert over_shm.compute_rewards(buffer, env_rewards=env, dones=dones).items == a.items
        over_shm.close()
    p = direct_probabilities(model.checkpoint_path, images)
    np.testing.assert_allclose(a.probabilities[a.scored], p[a.scored], atol=1e-5)
    shared = RewardClient(live_server_url, rl_token, per_step.name)  # one client, four threads at once
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: shared.compute_rewards(images[i : i + 3]).probabilities, range(8)))
    for i, probabilities in enumerate(got):
        np.testing.assert_allclose(probabilities, p[i : i + 3], atol=1e-5)
    assert shared.transport_used == "shm"
    shared.close()
    # the clients closed their segments: the worker lets go of its mappings at its next sweep (each second)
    _wait_until(lambda: "/memfd:rs-" not in _maps(inference_worker_process.pid), 10)


def test_auto_falls_back_to_http_when_the_server_refuses_the_segment(
    project, rl_token, live_server_url, inference_worker_process
):
    deployment = deploy(make_trained_model(project, seed=12))
    images = random_images(3, seed=6)
    client = RewardClient(live_server_url, rl_token, deployment.name)  # transport "auto"
    expected = RewardClient(live_server_url, rl_token, deployment.name, transport="http").compute_rewards(images)
    assert client.frames_buffer((1, 8, 8, 3)).shape == (1, 8, 8, 3)  # decided: the same-host path is on
    assert client.transport_used == "shm"
    assert client._shm is not None
    client._shm.close()
    client._shm.key = "0" * 16  # its next segment's name does not carry this client's key
    got = client.compute_rewards(images)
    assert got.items == expected.items
    assert client.transport_used == "http"
    assert "key" in client.shm_reason


def test_bad_descriptors_get_a_clear_4xx(project, rl_token, live_server_url, inference_worker_process):
    deployment = deploy(make_trained_model(project, seed=13))
    client = RewardClient(live_server_url, rl_token, deployment.name, transport="shm")
    good = client._shm_ready() and client._shm is not None and client._shm.write(random_images(2, seed=7))
    assert good
    url = f"{live_server_url}/api/deployments/{deployment.name}/rewards"
    headers = {"Authorization": f"Bearer {rl_token}", "Content-Type": "application/x-rs-shm"}

    def post(body) -> requests.Response:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return requests.post(url, data=raw, headers=headers, timeout=30)

    assert post(good).status_code == 200
    key = good["name"].split("-")[1]
    other = f"rs-{key}-{'ab' * 16}"
    cases = [
        (b"not json", 400, "JSON shared-memory descriptor"),
        ({**good, "extra": 1}, 400, "an object with"),
        ({**good, "dtype": "float32"}, 400, "uint8"),
        ({**good, "name": "/etc/passwd"}, 400, "rs-<your key>"),
        ({**good, "name": f"rs-{'0' * 16}-{'ab' * 16}"}, 400, "this client's key"),
        ({**good, "shape": [2, 32, 32, 4]}, 400, "[B,H,W,3]"),
        ({**good, "shape": [2000, 32, 32, 3]}, 413, "at most"),
        ({**good, "shape": [1024, 2048, 2048, 3]}, 413, "MAX_REQUEST_PIXELS"),
        ({**good, "fd": -1}, 400, "'fd'"),
        ({**good, "pid": 2**31 - 2}, 400, "on this host"),  # no such process
        ({**good, "name": other}, 400, "is not the segment"),  # the client's fd, another name
        ({**good, "fd": 0}, 400, "is not the segment"),  # not a memfd at all
        ({**good, "offset": client._shm.size}, 400, "needs"),  # past its end
        (b"x" * 5000, 413, "at most 4096 bytes"),
    ]
    unsealed = os.memfd_create(f"rs-{key}-{'cd' * 16}")  # a segment the server could not map safely
    os.ftruncate(unsealed, 1 << 16)
    cases.append(({**good, "pid": os.getpid(), "fd": unsealed, "name": f"rs-{key}-{'cd' * 16}"}, 400, "sealed"))
    for body, status, words in cases:
        response = post(body)
        assert response.status_code == status, (body, response.text)
        assert words in response.json()["detail"], (body, response.text)
    os.close(unsealed)
    client.close()


KILLED_CLIENT = """
import sys, numpy as np
from reward_client import RewardClient
client = RewardClient(sys.argv[1], sys.argv[2], sys.argv[3], transport="shm")
frames = client.frames_buffer((4, 32, 32, 3))
frames[:] = 7
client.compute_rewards(frames)  # answered: the inference worker has mapped the segment
print(client._shm.name, flush=True)
sys.stdin.readline()
client.compute_rewards(frames)  # waits: the inference worker is stopped
"""


def test_a_client_killed_mid_request_leaves_no_shared_memory(
    project, rl_token, live_server_url, inference_worker_process
):
    import redis
    from django.conf import settings

    from inference.broker import PAYLOAD_PREFIX

    def stored() -> set:  # requests stored and not yet answered (a stopped worker may have popped them already)
        return set(queue.scan_iter(match=PAYLOAD_PREFIX + "*"))

    deployment = deploy(make_trained_model(project, seed=14))
    shm_before = set(os.listdir("/dev/shm"))
    queue = redis.Redis.from_url(settings.REDIS_URL)
    client = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILLED_CLIENT), live_server_url, rl_token, deployment.name],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdout is not None and client.stdin is not None
    name = client.stdout.readline().strip()
    assert name.startswith("rs-")
    # one request answered: the worker that scored it keeps its mapping (the session's worker, or any other
    # inference worker on this Redis database: the one that holds the mapping is the one stopped below)
    _wait_until(lambda: _inference_workers_mapping(name), 5)
    worker = _inference_workers_mapping(name)[0]
    before = stored()
    os.kill(worker, signal.SIGSTOP)  # the next request waits in the queue
    try:
        client.stdin.write("go\n")
        client.stdin.flush()
        deadline = time.monotonic() + 20
        while not stored() - before:  # checked by the web process, queued
            assert time.monotonic() < deadline and client.poll() is None
            time.sleep(0.02)
        pending = stored() - before
        assert _memfd_holders(name) and not set(os.listdir("/dev/shm")) - shm_before
        client.kill()  # SIGKILL: no clean-up of any kind
        client.wait(10)
    finally:
        os.kill(worker, signal.SIGCONT)
    assert set(os.listdir("/dev/shm")) - shm_before == set()  # a memfd never had a name there
    _wait_until(lambda: not stored() & pending, 20)  # the worker takes the orphan request, finds no segment
    # and lets go of its kept mapping (with the descriptor CPython's mmap keeps) at its next sweep: nothing
    # of the segment is left anywhere, so the kernel has freed it
    _wait_until(lambda: name not in _maps(worker) and _memfd_holders(name) == [], 10)
    alive = RewardClient(live_server_url, rl_token, deployment.name, transport="shm")
    assert len(alive.compute_rewards(random_images(2)).rewards) == 2  # and serves on
    assert _memfd_holders(name) == []
    alive.close()


def test_a_person_s_session_gets_the_same_rewards_through_the_django_view(
    project, member_client, inference_worker_process
):
    from reward_client.shm import SharedFrames

    deployment = deploy(make_trained_model(project, seed=15), reward_type="soft")
    web = member_client(project, "annotator")
    info = web.get("/api/shm").json()
    assert info["enabled"] and info["workers_here"] >= 1 and info["media_type"] == "application/x-rs-shm"
    images = random_images(3, seed=8)
    frames = SharedFrames(info["key"])
    url = f"/api/deployments/{deployment.name}/rewards"
    shm = web.post(url, data=json.dumps(frames.write(images)), content_type="application/x-rs-shm")
    npy = web.post(url, data=_npy(images), content_type="application/x-npy")
    assert shm.status_code == npy.status_code == 200, shm.content
    assert shm.json()["items"] == npy.json()["items"]
    stranger = SharedFrames("f" * 16)  # a key that is not this person's
    refused = web.post(url, data=json.dumps(stranger.write(images)), content_type="application/x-rs-shm")
    assert refused.status_code == 400 and "this client's key" in refused.json()["detail"]
    frames.close()
    stranger.close()


def _npy(images: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, images)
    return buffer.getvalue()
