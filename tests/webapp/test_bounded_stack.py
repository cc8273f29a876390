"""Done-when of "bounded everywhere", live: ONE running stack (the web process, a Celery worker and an inference
worker, on a Redis server of the test's own, so no other test's worker takes its work) gets every class of
bad input of issue 26 in turn, while a thread asks for a page every 0.2 s:

- request bombs: a huge body, deep JSON, a huge chunk header, PNG bombs (a 4000x4000 header, a zlib bomb),
  a PNG whose compressed data is broken;
- pickle bombs and a zip bomb on the import page (the Celery worker runs each import);
- oversized batches (a `.npy` header and a JSON body past MAX_REQUEST_PIXELS), and large batches within the
  limits that the inference worker scores;
- VLM stream buffers over VLM_CLIENT_BUFFER_MAX_BYTES;
- malformed teleop messages on the agent socket;
- bad training settings (processes, nodes, a path outside MODEL_DIR).

Each gets a 4xx (or, for imports, a job that ends with the file skipped and the reason), every process's
memory (VmRSS and its peak VmHWM from /proc) grows by less than its stated bound, and the page answers within
1 s throughout.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import io
import json
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
import requests
from PIL import Image

from inference.broker import WORKERS_KEY, dump_npy
from labeling.models import Episode, ImportJob
from tests.conftest import _spawn, _stop, _wait_for_port, _warm_up, free_port
from tests.inference.conftest import deploy, make_trained_model
from tests.inference.teleop.test_consumers import HELLO
from tests.inference.teleop.test_malformed_messages import bad_messages
from tests.inference.test_redis_bounds import private_redis  # noqa: F401 - the fixture
from tests.labeling import pickle_bombs
from tests.labeling.broken_pngs import broken_png
from tests.labeling.ingest_helpers import multipart_chunk
from tests.labeling.test_ingest_bad_input import bomb_png
from tests.labeling.zip_bombs import zip_bomb
from tests.training.test_distributed_training import small_snapshot
from tests.training.test_training_job import SMALL
from tests.waiting import wait_until
from tests.webapp.test_request_bombs import PICKLES, _login, _memory, import_upload

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MIB = 1024 * 1024
PAGE_WITHIN_S = 1.0
VLM_BUDGET = 1 * MIB  # VLM_CLIENT_BUFFER_MAX_BYTES of this stack: one 512x512 step of two views is past it
# How much each process may grow while it refuses all of it: (VmRSS after - before, VmHWM after - before).
BOUNDS = {
    "web": (128 * MIB, 256 * MIB),
    "celery": (128 * MIB, 256 * MIB),
    "inference": (192 * MIB, 384 * MIB),
}


@pytest.fixture
def stack(process_env, private_redis):  # noqa: F811
    """web, Celery worker and inference worker, as the Procfile runs them, on the test's own Redis."""
    import redis

    env = {
        **process_env,
        "REDIS_URL": private_redis.url,
        "CELERY_BROKER_URL": private_redis.url,
        "CELERY_RESULT_BACKEND": private_redis.url,
        "VLM_CLIENT_BUFFER_MAX_BYTES": str(VLM_BUDGET),
        "DEBUG": "0",
    }
    port = free_port()
    web_args = [sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    celery_args = [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "ingest,training,inference,default"]
    celery_args += ["--pool", "solo", "-n", "bounded@%h", "--without-gossip", "--without-mingle", "-l", "WARNING"]
    inference_args = [sys.executable, "manage.py", "inference_worker", "--threads", "1", "--metrics-port", "0"]
    procs = {
        "web": _spawn([*web_args, "--no-proxy-headers", "--log-level", "warning"], env, "bounded-web.log"),
        "celery": _spawn(celery_args, env, "bounded-celery.log"),
        "inference": _spawn(inference_args, {**env, "OMP_WAIT_POLICY": "PASSIVE"}, "bounded-inference.log"),
    }
    try:
        _wait_for_port(port, procs["web"])
        _warm_up(f"http://127.0.0.1:{port}")
        client = redis.Redis.from_url(private_redis.url)
        wait_until(
            lambda: client.hlen(WORKERS_KEY) or procs["inference"].poll() is not None, 120, "the inference worker"
        )
        assert procs["inference"].poll() is None, "the inference worker exited; see artifacts/bounded-inference.log"
        yield f"http://127.0.0.1:{port}", {name: proc.pid for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.terminate()  # all at once: each may take seconds to shut down
        for proc in procs.values():
            _stop(proc)


def _png_b64(image: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG", compress_level=1)
    return base64.b64encode(buffer.getvalue()).decode()


def _huge_body(url: str, path: str, headers: dict) -> int:
    """A POST declaring a 10 GiB body, of which 64 KiB are sent: the answer must come without the rest."""
    conn = http.client.HTTPConnection(urlsplit(url).netloc, timeout=30)
    try:
        conn.putrequest("POST", path)
        for name, value in {**headers, "Content-Type": "application/json", "Content-Length": str(10 << 30)}.items():
            conn.putheader(name, value)
        conn.endheaders()
        conn.send(b"[" * 65536)
        return conn.getresponse().status
    finally:
        conn.close()


def _chunk_files(chunk: dict) -> tuple[dict, dict]:
    data = {k: v for k, v in chunk.items() if isinstance(v, str)}
    files = {k: (f"{k}.png", v.getvalue(), "image/png") for k, v in chunk.items() if not isinstance(v, str)}
    return data, files


def _teleop(url: str, token: str, project_name: str, episode: str) -> list[tuple[str | None, str]]:
    """The agent socket: hello, an episode, then every malformed message; (expected words, warning) pairs."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    pairs = []
    ws_url = url.replace("http://", "ws://") + "/ws/teleop/agent/"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=30) as socket:
        socket.send(json.dumps(dict(HELLO, project=project_name)))
        _receive_until(socket, "session")
        socket.send(json.dumps({"type": "episode_start", "episode": episode}))
        for message, words in bad_messages(episode):
            socket.send(message.get("text_data") or message["bytes_data"])
            if words is not None:
                pairs.append((words, _receive_until(socket, "warning")["message"]))
        socket.send(json.dumps({"type": "bye"}))
        with contextlib.suppress(ConnectionClosed):  # the server closes the socket after a bye
            while True:
                socket.recv(timeout=30)
    return pairs


def _receive_until(socket, kind: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        message = json.loads(socket.recv(timeout=max(0.1, deadline - time.monotonic())))
        if message["type"] == kind:
            return message
    raise AssertionError(f"no {kind!r} message")


@dataclass
class _Target:
    """What the bad input is thrown at: the stack's URL, an agent's token, a logged-in person, the project with
    its snapshot and episode, and its two deployments (a ResNet, a history_buffer VLM)."""

    url: str
    token: str
    people: requests.Session
    project: Any
    snapshot: Any
    resnet: Any
    vlm: Any
    episode: str

    @property
    def agent(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def npy(self) -> dict[str, str]:
        return {**self.agent, "Content-Type": "application/x-npy"}

    @property
    def rewards(self) -> str:
        return f"{self.url}/api/deployments/{self.resnet.name}/rewards"

    @property
    def steps(self) -> str:
        return f"/api/episodes/{self.episode}/steps"

    def import_file(self, blob: bytes, name: str) -> requests.Response:
        return import_upload(self.people, self.url, self.project.pk, blob, name)

    @staticmethod
    def import_job(response: requests.Response) -> ImportJob:
        job_id = int(response.headers["Location"].rstrip("/").rsplit("/", 1)[1])
        rows = ImportJob.objects.filter(pk=job_id)
        return wait_until(lambda: rows.filter(status__in=("succeeded", "failed")).first(), 120, f"import job {job_id}")

    def job(self, config: dict) -> requests.Response:
        return self.people.post(
            f"{self.url}/api/projects/{self.project.pk}/jobs",
            json={"snapshot": self.snapshot.number, "config": {**SMALL, **config}},
            headers={"X-CSRFToken": self.people.cookies["csrftoken"], "Referer": self.url},
            timeout=60,
        )

    def chunk(self, images: dict) -> int:
        data, files = _chunk_files(multipart_chunk([1, 2], images=images))
        return requests.post(
            f"{self.url}{self.steps}", data=data, files=files, headers=self.agent, timeout=60
        ).status_code


def _target(url: str, project, django_user_model) -> _Target:
    """The deployments, an agent for both, a superuser logged in and a small snapshot for the job API."""
    from projects.services import agent_create

    resnet = deploy(make_trained_model(project, seed=81))
    vlm_model = make_trained_model(project, seed=82)
    vlm_model.kind, vlm_model.name = "vlm", "tiny-vlm"
    vlm_model.save()
    vlm = deploy(vlm_model, reward_mode="history_buffer")
    token = agent_create(
        name="bounded", scopes=["ingest", "teleop", "rewards"], projects=[project], deployments=[resnet, vlm]
    )[1]
    django_user_model.objects.create_superuser("boss", "boss@example.com", "pw-boss-123")
    people = _login(url, "boss", "pw-boss-123")
    snapshot = small_snapshot(project, episodes=3, steps=6)
    return _Target(url, token, people, project, snapshot, resnet, vlm, episode=str(uuid.uuid4()))


def _warm_every_path(t: _Target) -> None:
    """Every path once with valid input, so imports, caches and the loaded model are in the baseline."""
    body = {"project": t.project.name, "uuid": t.episode}
    created = requests.post(f"{t.url}/api/episodes", json=body, headers=t.agent)
    assert created.status_code == 201, created.text
    assert t.chunk({}) == 200
    warm = requests.post(t.rewards, data=dump_npy(np.zeros((2, 32, 32, 3), np.uint8)), headers=t.npy, timeout=120)
    assert warm.status_code == 200, warm.text
    assert t.import_job(t.import_file(pickle_bombs.cycle(), "rank_0_env_0_episode_0_success.pkl")).status == "succeeded"
    assert t.people.get(f"{t.url}/projects/{t.project.pk}/", timeout=60).status_code == 200
    assert t.job({"processes": 1, "epochs": 0}).status_code in (201, 400)  # the job API's code path, either way


def _bombs(t: _Target) -> tuple[dict, Callable[[], list[int]]]:
    """Name -> a call that throws that class of bad request and returns its status; and a call that sends four
    large batches within the limits at once (their statuses)."""
    url, agent, npy = t.url, t.agent, t.npy
    black = _png_b64(np.zeros((2048, 2048, 3), np.uint8))
    rng = np.random.default_rng(0)
    noisy = _png_b64(rng.integers(0, 256, (512, 512, 3), dtype=np.uint8))
    big_batch = dump_npy(rng.integers(0, 256, (12, 512, 512, 3), dtype=np.uint8))  # within MAX_REQUEST_PIXELS
    vlm_steps = {"steps": [{"stream": s, "main": noisy, "extra": noisy} for s in ("env0", "env1")]}

    def big_batches() -> list[int]:
        with ThreadPoolExecutor(4) as pool:
            answers = pool.map(lambda _: requests.post(t.rewards, data=big_batch, headers=npy, timeout=120), range(4))
            return [a.status_code for a in answers]

    bombs = {
        "huge body": lambda: _huge_body(url, f"/api/deployments/{t.resnet.name}/rewards", agent),
        "deep JSON": lambda: (
            requests.post(
                f"{url}/api/episodes",
                data="[" * 5000 + "]" * 5000,
                headers={**agent, "Content-Type": "application/json"},
            ).status_code
        ),
        "huge chunk header": lambda: (
            requests.post(
                f"{url}{t.steps}",
                data=b"RSC\x01" + struct.pack(">I", 3 * MIB) + b" " * (3 * MIB),
                headers={**agent, "Content-Type": "application/x-rs-steps"},
            ).status_code
        ),
        "PNG bomb (4000x4000)": lambda: t.chunk({(2, "extra"): bomb_png()}),
        "PNG bomb (256 MiB zlib)": lambda: t.chunk({(2, "extra"): broken_png("bomb")}),
        "broken IDAT": lambda: t.chunk({(2, "main"): broken_png("corrupt stream")}),
        "oversized batch (npy)": lambda: (
            requests.post(t.rewards, data=_npy_header((1024, 2048, 2048, 3)), headers=npy, timeout=60).status_code
        ),
        "oversized batch (JSON)": lambda: (
            requests.post(t.rewards, json={"images": [black] * 32}, headers=agent, timeout=120).status_code
        ),
        "VLM buffers over budget": lambda: (
            requests.post(
                f"{url}/api/deployments/{t.vlm.name}/vlm/rewards", json=vlm_steps, headers=agent, timeout=60
            ).status_code
        ),
        "processes": lambda: t.job({"processes": 64}).status_code,
        "nodes": lambda: t.job({"nodes": 10_000}).status_code,
        "path outside MODEL_DIR": lambda: t.job({"pretrained": True, "pretrained_path": "/etc/passwd"}).status_code,
    }
    return bombs, big_batches


def _throw_while_paging(t: _Target, pids: dict[str, int], bombs: dict, uploads: dict, big_batches, teleop_episode):
    """Every class in turn on a thread (each process's RSS read after each), while a person's page is asked for
    every 0.2 s; returns (answers by class, the RSS trail, each page's (seconds, status))."""
    answers: dict[str, object] = {}
    trail: list[tuple[str, dict[str, int]]] = []  # each process's RSS (MiB) after each class: what grew where

    def mark(name: str) -> None:
        trail.append((name, {proc: _memory(pid)["VmRSS"] // MIB for proc, pid in pids.items()}))

    def throw():
        for name, bomb in bombs.items():
            answers[name] = bomb()
            mark(name)
        for name, blob in uploads.items():
            file_name = "bomb.zip" if name == "zip bomb" else "rank_0_env_0_episode_1_success.pkl"
            answers[name] = t.import_file(blob, file_name)
            mark(name)
        answers["large batches within the limits"] = big_batches()
        mark("large batches")
        answers["teleop"] = _teleop(t.url, t.token, t.project.name, teleop_episode)
        mark("teleop")

    thrower = threading.Thread(target=throw)
    thrower.start()
    pages = []
    while thrower.is_alive():
        start = time.monotonic()
        status = t.people.get(f"{t.url}/projects/{t.project.pk}/", timeout=30).status_code
        pages.append((time.monotonic() - start, status))
        time.sleep(0.2)
    thrower.join()
    return answers, trail, pages


def _check_each_class_refused(answers: dict, jobs: dict, teleop_episode: str, episodes: int) -> None:
    """A 4xx for each request, imports skipped with the reason, the teleop warnings, nothing stored."""
    expected = {
        "huge body": 413,
        "deep JSON": 400,
        "huge chunk header": 413,
        "PNG bomb (4000x4000)": 400,
        "PNG bomb (256 MiB zlib)": 400,
        "broken IDAT": 400,
        "oversized batch (npy)": 413,
        "oversized batch (JSON)": 413,
        "VLM buffers over budget": 429,
        "processes": 400,
        "nodes": 400,
        "path outside MODEL_DIR": 400,
    }
    assert {name: answers[name] for name in expected} == expected
    assert answers["large batches within the limits"] == [200] * 4
    for name, reason in PICKLES.items():
        got = jobs[name]
        assert got.status == "succeeded" and len(got.summary["failed"]) == 1, got.summary
        assert reason in got.summary["failed"][0][1], got.summary
    bomb_job = jobs["zip bomb"]
    assert "nothing was unpacked" in json.dumps([bomb_job.error, bomb_job.summary]), (bomb_job.error, bomb_job.summary)
    for words, message in answers["teleop"]:
        assert words in message, (words, message)
    assert Episode.objects.exclude(uuid=teleop_episode).count() == episodes  # nothing of it was stored


def _check_memory_and_pages(before: dict, after: dict, pids: dict[str, int], trail: list, pages: list) -> None:
    """Each process grew by less than its bound; every page answered 200 within PAGE_WITHIN_S."""
    growth = {
        name: (after[name]["VmRSS"] - before[name]["VmRSS"], after[name]["VmHWM"] - before[name]["VmHWM"])
        for name in pids
    }
    print("RSS before (MiB):", {n: m["VmRSS"] // MIB for n, m in before.items()}, "then after each class:", trail)
    print("memory growth (RSS, peak) MiB:", {n: (r // MIB, p // MIB) for n, (r, p) in growth.items()})
    print(f"pages: {len(pages)}, slowest {max(t for t, _ in pages):.2f} s")
    for name, (rss, peak) in growth.items():
        assert rss < BOUNDS[name][0] and peak < BOUNDS[name][1], (name, growth[name], BOUNDS[name], trail)
    assert all(status == 200 for _, status in pages), pages
    assert max(t for t, _ in pages) < PAGE_WITHIN_S, sorted(pages)[-5:]


def test_every_class_of_bad_input_gets_a_4xx_in_bounded_memory_while_pages_answer(
    stack, project, django_user_model, settings
):
    url, pids = stack
    t = _target(url, project, django_user_model)
    _warm_every_path(t)
    episodes = Episode.objects.count()
    before = {name: _memory(pid) for name, pid in pids.items()}

    bombs, big_batches = _bombs(t)
    uploads = {name: getattr(pickle_bombs, name)() for name in PICKLES}
    uploads["zip bomb"] = zip_bomb()
    teleop_episode = str(uuid.uuid4())
    answers, trail, pages = _throw_while_paging(t, pids, bombs, uploads, big_batches, teleop_episode)
    jobs = {name: t.import_job(answers[name]) for name in uploads}  # the Celery worker's part
    after = {name: _memory(pid) for name, pid in pids.items()}

    _check_each_class_refused(answers, jobs, teleop_episode, episodes)
    _check_memory_and_pages(before, after, pids, trail, pages)


def _npy_header(shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "|u1", "fortran_order": False, "shape": shape})
    return buffer.getvalue()
