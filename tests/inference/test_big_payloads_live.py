"""Live: concurrent 151 MB reward payloads (12 x 2048x2048 RGB `.npy`, as the security pass sent them) at a
Redis capped at 1 GiB (noeviction, private to the test). The Procfile's web line (two web processes) and a real
inference worker serve them. Every request is answered within reward_client's timeout (a busy refusal with
`Retry-After` is fine), every scored one gets its answer (none lost to a reply Redis refused), Redis stays
under its cap, and the web processes together grow by less than WEB_MEMORY_BOUND (they grew by 2.4 to
4.4 GiB before WEB_BODIES_MAX_BYTES)."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time

import numpy as np
import pytest
import requests

from common.memory import rss_bytes
from tests.conftest import ROOT, _spawn, _stop, _wait_for_port, free_port
from tests.webapp.test_web_processes import children

from .conftest import deploy, make_trained_model
from .test_redis_bounds import capped_redis_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MiB = 1024 * 1024
MAXMEMORY = 1024 * MiB  # the run command's RS_REDIS_MAXMEMORY
CLIENTS = 16  # as the security pass sent them
TIMEOUT_S = 130.0  # reward_client's default timeout
WEB_BODIES = 384 * MiB  # WEB_BODIES_MAX_BYTES (the default), per web process
WEB_MEMORY_BOUND = 2 * (WEB_BODIES + 384 * MiB)  # two web processes: the bodies each holds, and its copies


def _web_pids(parent: int) -> list[int]:
    """uvicorn's parent and the web processes it runs."""
    return [parent, *children(parent)]


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.fixture
def capped_redis(tmp_path):
    with capped_redis_server(tmp_path, MAXMEMORY) as server:
        yield server


def _spawn_web_and_worker(process_env, url: str):
    """The Procfile's web line (two web processes) and an inference worker, both on the capped Redis; returns
    (web, worker, port)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from supervisor_conf import procfile_parse

    env = {**process_env, "REDIS_URL": url, "CELERY_BROKER_URL": url, "CELERY_RESULT_BACKEND": url}
    env |= {"REWARDS_RATE_LIMIT": "10000/second", "RS_WEB_PROCESSES": "2"}
    env["PATH"] = f"{os.path.dirname(sys.executable)}:{env['PATH']}"
    port = free_port()
    web_line = dict(procfile_parse((ROOT / "Procfile").read_text()))["web"]
    web = _spawn(
        ["bash", "-c", f"exec {web_line}"], env | {"RS_HOST": "127.0.0.1", "RS_PORT": str(port)}, "web-big.log"
    )
    worker = _spawn([sys.executable, "manage.py", "inference_worker", "--threads", "1"], env, "inference-big.log")
    return web, worker, port


def _web_memory_at_rest(redis, worker, web, port: int, rewards: str, headers: dict) -> int:
    """Waits for the worker and the web, has each web process answer once (its imports, the model loaded),
    and returns the web processes' memory then."""
    deadline = time.monotonic() + 180
    while not redis.hlen("rs:inf:workers"):
        assert worker.poll() is None and time.monotonic() < deadline, "the inference worker did not start"
        time.sleep(0.2)
    _wait_for_port(port, web)
    small = np.zeros((2, 32, 32, 3), np.uint8)
    for _ in range(4):  # each web process answers once (its imports, the model loaded): memory at rest
        assert requests.post(rewards, data=_npy(small), headers=headers, timeout=180).status_code == 200
    pids = _web_pids(web.pid)
    assert len(pids) >= 3, pids  # the parent and two web processes
    return sum(rss_bytes(pid) for pid in pids)


def _send_big_payloads(rewards: str, headers: dict, redis, web) -> tuple[list[tuple[int, float, str, str]], dict]:
    """CLIENTS concurrent 151 MB requests while a sampler records the peaks of Redis's and the web's memory;
    returns (answers as (status, seconds, Retry-After, text), peaks)."""
    body = _npy(np.zeros((12, 2048, 2048, 3), np.uint8))
    assert len(body) > 150_000_000
    answers: list[tuple[int, float, str, str]] = []
    peaks = {"redis": 0, "web": 0}
    done = threading.Event()

    def big() -> None:
        started = time.monotonic()
        try:
            r = requests.post(rewards, data=body, headers=headers, timeout=TIMEOUT_S)
            answers.append((r.status_code, time.monotonic() - started, r.headers.get("Retry-After", ""), r.text))
        except requests.RequestException as exc:
            answers.append((0, time.monotonic() - started, "", repr(exc)))

    def sample() -> None:
        while not done.is_set():
            peaks["redis"] = max(peaks["redis"], int(redis.info("memory")["used_memory"]))
            peaks["web"] = max(peaks["web"], sum(rss_bytes(pid) for pid in _web_pids(web.pid)))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=big) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S + 30)
    done.set()
    sampler.join(5)
    return answers, peaks


def _check_answers_and_peaks(answers: list[tuple[int, float, str, str]], peaks: dict, web_before: int) -> None:
    """Every request answered in time (scored or refused busy, never a lost reply), Redis under its cap, the
    web's growth bounded."""
    statuses = sorted(status for status, *_ in answers)
    report = [(status, round(seconds, 1), text[:160]) for status, seconds, _, text in answers]
    print(*report, sep="\n")
    print(
        f"statuses {statuses}; Redis peak {peaks['redis'] / MiB:.0f} MiB; web +{(peaks['web'] - web_before) / MiB:.0f} MiB"
    )
    assert len(answers) == CLIENTS, report
    assert all(seconds < TIMEOUT_S for _, seconds, _, _ in answers), report  # every request answered in time
    assert statuses.count(200) >= 1, report  # the service scored some
    for status, _, retry_after, text in answers:
        assert status in (200, 503), report  # scored, or a busy refusal
        if status == 200:
            assert len(json.loads(text)["items"]) == 12, report
        if status == 503:
            assert retry_after and "reply" not in text, report  # a refusal before scoring, never a lost reply
    assert peaks["redis"] <= MAXMEMORY, f"Redis peaked at {peaks['redis'] / MiB:.0f} MiB"
    grown = peaks["web"] - web_before
    assert grown < WEB_MEMORY_BOUND, f"the web processes grew by {grown / MiB:.0f} MiB ({report})"


def test_concurrent_150mb_payloads_are_answered_and_the_web_stays_bounded(process_env, capped_redis, project):
    from projects.services import agent_create

    url, redis = capped_redis
    deployment = deploy(make_trained_model(project))
    token = agent_create(name="rl-big", kind="rl_worker", all_projects=True)[1]
    web, worker, port = _spawn_web_and_worker(process_env, url)
    base = f"http://127.0.0.1:{port}"
    rewards = f"{base}/api/deployments/{deployment.name}/rewards"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-npy"}
    try:
        web_before = _web_memory_at_rest(redis, worker, web, port, rewards, headers)
        answers, peaks = _send_big_payloads(rewards, headers, redis, web)
    finally:
        _stop(web)
        _stop(worker)
    _check_answers_and_peaks(answers, peaks, web_before)
