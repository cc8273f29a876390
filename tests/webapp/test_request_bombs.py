"""Bombs against a live server: each gets a 4xx, the serving process stays small, and the app keeps answering.

Small requests that decode or unpickle into huge allocations: a JSON rewards body of black 2048x2048
PNGs, a `.npy` header claiming a gigapixel batch, a chat request with hundreds of image parts, and
pickle bombs uploaded to the import page (the web process only stores them: the page answers with a
redirect to the import job at once, and the job, run here as the Celery task would, fails naming the
bomb). The server's RSS is read from /proc/<pid>/status.
"""

from __future__ import annotations

import base64
import io
import re
import sys
import threading
import time

import numpy as np
import pytest
import requests
from PIL import Image

from labeling.imports.jobs import import_job_run
from labeling.models import Episode
from tests.conftest import _spawn, _stop, _wait_for_port, free_port
from tests.inference.conftest import deploy, make_trained_model
from tests.labeling import pickle_bombs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
MIB = 1024 * 1024
PICKLES = {
    "bytearray_bomb": "refusing bytearray",
    "stateless_episode": "without its state",
    "shared_nesting_episode": "shared references",
    "zero_strides": "1000000000 elements",
    "storage_bomb": "declares 2147483647 elements",
}


@pytest.fixture
def server(process_env):
    """Our own uvicorn (like live_server_url), so the test knows the serving process's pid."""
    port = free_port()
    args = [sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    # no inference worker need run: a warm-up request waiting for one gives up in 5 s (not the 120 s default,
    # past its client's timeout), and one running for the session answers it sooner
    env = {**process_env, "INFERENCE_TIMEOUT_S": "5"}
    proc = _spawn([*args, "--log-level", "warning"], env, f"uvicorn-bombs-{port}.log")
    try:
        _wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        _stop(proc)


def _memory(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as status:
        fields = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status.read(), re.M))
    return {name: int(value) * 1024 for name, value in fields.items()}


def _png_b64(side: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _npy_header_only(shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "|u1", "fortran_order": False, "shape": shape})
    return (
        b"\x93NUMPY\x01\x00" + buffer.getvalue()[8:] if not buffer.getvalue().startswith(b"\x93") else buffer.getvalue()
    )


def _login(url: str, username: str, password: str) -> requests.Session:
    session = requests.Session()
    session.get(f"{url}/accounts/login/", timeout=120)
    response = session.post(
        f"{url}/accounts/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        headers={"Referer": f"{url}/accounts/login/"},
        timeout=30,
    )
    assert response.ok
    return session


def import_upload(people: requests.Session, url: str, project_id: int, blob: bytes, name: str) -> requests.Response:
    """One file through the import page, as a logged-in person uploads it (answered with a redirect to its job)."""
    return people.post(
        f"{url}/projects/{project_id}/import/",
        files={"files": (name, blob, "application/octet-stream")},
        data={"csrfmiddlewaretoken": people.cookies["csrftoken"]},
        headers={"Referer": url},
        timeout=120,
        allow_redirects=False,
    )


def _deploy_rewards_and_chat(project):
    """A ResNet deployment for rewards and a VLM one for chat, and an agent token for both; returns
    (deployment, chat_deployment, token)."""
    from projects.services import agent_create

    deployment = deploy(make_trained_model(project, seed=71))
    # chat needs a VLM deployment (a ResNet one gets a cheap 400 before any image is read); no worker loads
    # it here, so its checkpoint is never opened: the bomb must be refused before that
    vlm = make_trained_model(project, seed=72)
    vlm.kind, vlm.name = "vlm", "tiny-vlm"
    vlm.save()
    chat_deployment = deploy(vlm)
    token = agent_create(name="bomber", kind="rl_worker", deployments=[deployment, chat_deployment])[1]
    return deployment, chat_deployment, token


def _warm_up(url: str, rewards: str, agent: dict, import_pickle) -> None:
    """Every path once with valid input, so imports and caches are in the baseline."""
    small = {"images": [_png_b64(16)], "env_rewards": [0.0]}
    assert requests.post(rewards, json=small, headers=agent, timeout=60).status_code in (200, 503)
    chat = requests.post(f"{url}/v1/chat/completions", json={"model": "x", "messages": []}, headers=agent, timeout=60)
    assert chat.status_code == 400
    assert import_pickle(pickle_bombs.cycle(), "rank_0_env_0_episode_0_success.pkl").status_code == 302


def _bombs(url: str, rewards: str, agent: dict, chat_deployment, import_pickle) -> dict:
    """Name -> a call that throws that bomb: big black PNGs, a gigapixel `.npy` header, 400 chat images and
    the pickle bombs through the import page."""
    black = _png_b64(2048)
    chat_parts = [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{black}"}}] * 400
    bombs = {
        "rewards-json": lambda: requests.post(rewards, json={"images": [black] * 32}, headers=agent, timeout=120),
        "rewards-npy": lambda: requests.post(
            rewards,
            data=_npy_header_only((1024, 2048, 2048, 3)),
            headers={**agent, "Content-Type": "application/x-npy"},
            timeout=120,
        ),
        "chat": lambda: requests.post(
            f"{url}/v1/chat/completions",
            json={"model": chat_deployment.name, "messages": [{"role": "user", "content": chat_parts}]},
            headers=agent,
            timeout=120,
        ),
    }
    for name in PICKLES:
        blob = getattr(pickle_bombs, name)()
        bombs[name] = lambda blob=blob: import_pickle(blob, "rank_0_env_0_episode_1_success.pkl")
    return bombs


def _throw_while_checking_health(url: str, bombs: dict) -> tuple[dict[str, requests.Response], float]:
    """Throws the bombs in order on a thread while the health check is polled; returns (answers, slowest
    health check in seconds)."""
    answers: dict[str, requests.Response] = {}

    def throw():
        for name, bomb in bombs.items():
            answers[name] = bomb()

    thrower = threading.Thread(target=throw)
    thrower.start()
    slowest = 0.0
    while thrower.is_alive():
        start = time.monotonic()
        health = requests.get(f"{url}/healthz", timeout=30)  # 503 here: a deployment, no inference worker
        assert health.json()["database"]["ok"] and health.json()["redis"]["ok"], health.text
        slowest = max(slowest, time.monotonic() - start)
        time.sleep(0.2)
    thrower.join()
    return answers, slowest


def _check_every_bomb_refused(answers: dict[str, requests.Response], bombs: dict) -> None:
    """A 4xx naming the limit, or for a pickle an import job that fails naming the bomb; no episode kept."""
    codes = {name: response.status_code for name, response in answers.items()}
    assert codes["rewards-json"] == 413 and "MAX_REQUEST_PIXELS" in answers["rewards-json"].json()["detail"], codes
    assert codes["rewards-npy"] == 413 and "MAX_REQUEST_PIXELS" in answers["rewards-npy"].json()["detail"], codes
    assert codes["chat"] == 413 and "at most 64 images" in answers["chat"].json()["error"]["message"], codes
    for name in bombs:
        assert 400 <= codes[name] < 500 or name in PICKLES and codes[name] == 302, codes
    for name, expected in PICKLES.items():
        job = import_job_run(int(answers[name].headers["Location"].rstrip("/").rsplit("/", 1)[1]))
        # a Celery worker left running by another test module may have claimed it first: wait for its run
        deadline = time.monotonic() + 120
        while job.status not in ("succeeded", "failed") and time.monotonic() < deadline:
            time.sleep(0.2)
            job.refresh_from_db()
        assert job.status == "succeeded" and len(job.summary["failed"]) == 1, job.summary
        assert expected in job.summary["failed"][0][1], job.summary
    assert not Episode.objects.exists()


def test_bombs_get_a_4xx_in_bounded_memory_while_the_app_answers(server, project, django_user_model):
    url, pid = server
    deployment, chat_deployment, token = _deploy_rewards_and_chat(project)
    django_user_model.objects.create_superuser("boss", "boss@example.com", "pw-boss-123")
    people = _login(url, "boss", "pw-boss-123")
    agent = {"Authorization": f"Bearer {token}"}
    rewards = f"{url}/api/deployments/{deployment.name}/rewards"

    def import_pickle(blob: bytes, name: str) -> requests.Response:
        return import_upload(people, url, project.pk, blob, name)

    _warm_up(url, rewards, agent, import_pickle)
    before = _memory(pid)
    bombs = _bombs(url, rewards, agent, chat_deployment, import_pickle)
    answers, slowest = _throw_while_checking_health(url, bombs)
    after = _memory(pid)

    _check_every_bomb_refused(answers, bombs)
    # The serving process: its peak grew by less than 256 MiB and it did not keep what it took.
    assert after["VmHWM"] - before["VmHWM"] < 256 * MIB, (before, after)
    assert after["VmRSS"] - before["VmRSS"] < 128 * MIB, (before, after)
    assert slowest < 10, f"the health check took {slowest:.1f}s while bombs were thrown"
