"""Live: two tokens of two projects filling VLM step buffers as fast as they can leave a third project's ResNet
and VLM rewards answering 200, and Redis never passes its cap; a step arriving while Redis is full is a 503
with Retry-After. The real web server (uvicorn) and inference worker (a tiny ResNet, a tiny Qwen3-VL) run on
a private redis-server with a small maxmemory (noeviction), never the shared one."""

from __future__ import annotations

import base64
import io
import sys
import threading
import time
import uuid
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pytest
import redis as redis_lib
import requests
from PIL import Image

from inference.vlm.budget import BUDGET_KEY
from tests.conftest import _spawn, _stop, _wait_for_port, _warm_up, free_port

from .conftest import deploy, make_trained_model
from .test_redis_bounds import capped_redis_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MiB = 1024 * 1024
MAXMEMORY = 96 * MiB
BUFFERS = 40 * MiB  # VLM_BUFFERS_MAX_BYTES: well under the cap
PROJECT_SHARE = 16 * MiB  # VLM_PROJECT_BUFFERS_MAX_BYTES: two projects at their share leave room for a third
ATTACK_S = 12.0


def _png(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


@contextmanager
def _stack(process_env, url: str):
    """uvicorn and `manage.py inference_worker` on the private Redis, with the test's budgets."""
    env = {
        **process_env,
        "REDIS_URL": url,
        "CELERY_BROKER_URL": url,
        "CELERY_RESULT_BACKEND": url,
        "VLM_BUFFERS_MAX_BYTES": str(BUFFERS),
        "VLM_PROJECT_BUFFERS_MAX_BYTES": str(PROJECT_SHARE),
        "REWARDS_RATE_LIMIT": "10000/second",
        "BAD_REQUEST_RATE_LIMIT": "10000/second",
    }
    port = free_port()
    web = _spawn(
        [sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
        + ["--log-level", "warning"],
        env,
        f"uvicorn-tenants-{port}.log",
    )
    worker = _spawn(
        [sys.executable, "manage.py", "inference_worker", "--threads", "1"], env, f"inference-worker-tenants-{port}.log"
    )
    try:
        client = redis_lib.Redis.from_url(url)
        deadline = time.monotonic() + 180
        while not client.hlen("rs:inf:workers"):
            assert worker.poll() is None and time.monotonic() < deadline, "the inference worker did not start"
            time.sleep(0.2)
        client.close()
        _wait_for_port(port, web)
        _warm_up(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(web)
        _stop(worker)


@pytest.fixture
def capped_redis(tmp_path):
    with capped_redis_server(tmp_path, MAXMEMORY) as server:
        yield server


def _vlm_models(projects):
    """One tiny Qwen3-VL folder, registered as a model of each project (each deployment is its project's)."""
    from django.core.files.storage import default_storage

    from training.models import TrainedModel
    from training.vlm.fixture import build_tiny_qwen3_vl
    from training.vlm.prompt import prompt_render

    name = f"checkpoints/vlm_{uuid.uuid4().hex[:8]}"
    build_tiny_qwen3_vl(default_storage.path(name))
    return [
        TrainedModel.objects.create(
            project=p,
            kind="vlm",
            name="tiny-qwen3-vl",
            checkpoint_path=name,
            config={"prompt": prompt_render(p.prompt_template, task=p.task_description, window_size=5)},
        )
        for p in projects
    ]


def _three_projects_deployed():
    """Three projects, each with a history_vlm deployment of the tiny Qwen3-VL and an agent token; the third also
    has a ResNet deployment. Returns (vlm deployments, resnet deployment, tokens)."""
    from projects.models import Project
    from projects.services import agent_create

    projects = [Project.objects.create(name=f"P{i}", task_description="Pick up the red cube.") for i in range(3)]
    history = {"reward_mode": "history_buffer", "history_size": 2, "min_history_size": 2, "input_interval": 1}
    vlm = [deploy(model, **history) for model in _vlm_models(projects)]
    resnet = deploy(make_trained_model(projects[2]))
    tokens = [
        agent_create(name=f"rl-{i}", kind="rl_worker", projects=[p], deployments=[vlm[i], *([resnet] * (i == 2))])[1]
        for i, p in enumerate(projects)
    ]
    return vlm, resnet, tokens


def _warm_the_third(base: str, headers: dict, resnet_name: str, vlm_name: str, black: str) -> None:
    """The third project's models loaded before the attack (a first forward loads them: tens of seconds here)."""
    warm = np.zeros((1, 32, 32, 3), np.uint8)
    buffer = io.BytesIO()
    np.save(buffer, warm)
    r = requests.post(
        f"{base}/api/deployments/{resnet_name}/rewards",
        data=buffer.getvalue(),
        headers={**headers, "Content-Type": "application/x-npy"},
        timeout=180,
    )
    assert r.status_code == 200, r.text
    for _ in range(2):
        steps = [{"stream": "warm", "main": black, "extra": black}]
        r = requests.post(
            f"{base}/api/deployments/{vlm_name}/vlm/rewards", json={"steps": steps}, headers=headers, timeout=180
        )
        assert r.status_code == 200, r.text


def _sample_peak(client, stop: threading.Event, peak: list[int]) -> None:
    """Redis's used memory, its highest in peak[0], until `stop`."""
    while not stop.is_set():
        peak[0] = max(peak[0], int(client.info("memory")["used_memory"]))
        time.sleep(0.02)


def _attack(base: str, token: str, deployment: str, seed: int, black: str, stop: threading.Event, attackers: Counter):
    """New VLM streams of big black steps as fast as one client can send them, until `stop`; counts statuses."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    n = 0
    while not stop.is_set():
        steps = [{"stream": f"s{seed}-{n}-{k}", "main": black, "extra": black} for k in range(4)]
        n += 1
        r = session.post(f"{base}/api/deployments/{deployment}/vlm/rewards", json={"steps": steps}, timeout=60)
        attackers[r.status_code] += 1


def _serve_victim(base: str, token: str, resnet_name: str, vlm_name: str, stop: threading.Event, victim: list):
    """The third project's ResNet rewards and VLM steps of one stream, every 0.2 s until `stop`; records each
    answer as (kind, status, text)."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    images = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    np.save(buffer, images)
    frame = _png(np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    t = 0
    while not stop.is_set():
        r = session.post(
            f"{base}/api/deployments/{resnet_name}/rewards",
            data=buffer.getvalue(),
            headers={"Content-Type": "application/x-npy"},
            timeout=120,
        )
        victim.append(("resnet", r.status_code, r.text[:200]))
        steps = [{"stream": "victim", "main": frame, "extra": frame}]
        r = session.post(f"{base}/api/deployments/{vlm_name}/vlm/rewards", json={"steps": steps}, timeout=120)
        victim.append(("vlm", r.status_code, r.text[:200]))
        if r.status_code == 200 and t:
            assert r.json()["items"][0]["scored"], r.text  # a window of the stream's steps was scored
        t += 1
        time.sleep(0.2)


def _attack_while_serving_the_third(base: str, client, vlm: list, resnet, tokens: list, black: str):
    """Two attackers each for the first two projects, the third project's client and a Redis sampler, for
    ATTACK_S; returns (attackers' statuses, victim's answers, Redis's peak, VLM buffers held at the end)."""
    stop = threading.Event()
    peak = [0]
    attackers: Counter = Counter()
    victim: list[tuple[str, int, str]] = []
    threads = [
        threading.Thread(target=_sample_peak, args=(client, stop, peak)),
        threading.Thread(target=_serve_victim, args=(base, tokens[2], resnet.name, vlm[2].name, stop, victim)),
    ]
    threads += [
        threading.Thread(target=_attack, args=(base, tokens[i], vlm[i].name, 10 * i + j, black, stop, attackers))
        for i in (0, 1)
        for j in (0, 1)
    ]
    for thread in threads:
        thread.start()
    time.sleep(ATTACK_S)
    buffered = sum(int(v) for v in client.hvals(BUDGET_KEY))
    stop.set()
    for thread in threads:
        thread.join(120)
    return attackers, victim, peak[0], buffered


def _check_a_full_redis_is_a_503_then_back(base: str, client, vlm_name: str, headers: dict, black: str) -> None:
    """Redis full (someone else's writes): a VLM step is a 503 with Retry-After, never a 500; and a 200 at
    once when Redis has room again."""
    i = 0
    while True:
        try:
            client.set(f"filler:{i}", b"x" * MiB)
        except redis_lib.exceptions.OutOfMemoryError:
            break
        i += 1
    for stream in ("victim", "new-stream"):
        steps = [{"stream": stream, "main": black, "extra": black}]
        r = requests.post(
            f"{base}/api/deployments/{vlm_name}/vlm/rewards", json={"steps": steps}, headers=headers, timeout=60
        )
        assert r.status_code == 503 and r.headers.get("Retry-After"), (r.status_code, r.headers, r.text)
        assert "maxmemory" in r.text, r.text
    for key in client.scan_iter("filler:*"):
        client.delete(key)
    r = requests.post(
        f"{base}/api/deployments/{vlm_name}/vlm/rewards", json={"steps": steps}, headers=headers, timeout=60
    )
    assert r.status_code == 200, r.text  # and back at once when Redis has room


def test_two_tenants_filling_vlm_buffers_leave_a_third_served_and_redis_under_its_cap(process_env, capped_redis, user):
    url, client = capped_redis
    vlm, resnet, tokens = _three_projects_deployed()
    black = _png(np.zeros((512, 512, 3), np.uint8))  # 1.3 kB of PNG, 786 kB of pixels per view

    with _stack(process_env, url) as base:
        headers = {"Authorization": f"Bearer {tokens[2]}"}
        _warm_the_third(base, headers, resnet.name, vlm[2].name, black)
        attackers, victim, peak, buffered = _attack_while_serving_the_third(base, client, vlm, resnet, tokens, black)

        print(f"attackers: {dict(attackers)}; victim: {Counter((k, s) for k, s, _ in victim)}; ")
        print(f"Redis peak {peak / MiB:.1f} MiB of {MAXMEMORY / MiB:.0f}; buffers at the end {buffered / MiB:.1f} MiB")
        assert attackers[429] > 0, attackers  # they did reach their projects' shares...
        assert attackers[200] > 0, attackers
        assert sum(1 for kind, _, _ in victim if kind == "vlm") >= 3, victim
        assert all(status == 200 for _, status, _ in victim), [
            v for v in victim if v[1] != 200
        ]  # ...the third is served
        assert buffered <= BUFFERS, buffered
        assert 0 < peak <= MAXMEMORY, peak

        _check_a_full_redis_is_a_503_then_back(base, client, vlm[2].name, headers, black)
