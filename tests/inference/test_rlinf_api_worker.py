"""RLinf's chat reward requests, sent by RLinf 0.3.0's own code, against a real inference worker on the tiny
Qwen3-VL.

What is released code and what is not: RLinf 0.3.0 has NO API reward worker (`rlinf/workers/reward/
api_reward_worker.py` exists only at RLinf's repository head), so no released code assembles the request body.
Everything else runs from the 0.3.0 wheel in the interop environment (tests/interop/side_rlinf_mirrors.py):
- `qwentrend_input_builder` turns each env's window into its two videos (main view, then the extra view) and
  RLinf's prompt text with the task;
- the body is assembled as head's `_build_chat_payloads` does, byte-compatible with head's source: every frame of
  the main then the extra video as a `data:image/jpeg;base64` `image_url` part (JPEG quality 95, head's
  `_frame_to_data_url`), then one text part with the prompt; `model` = the base model folder's name (head's
  `_derive_model_name`); `max_tokens` 16 and `temperature` 0 (head's example `sampling_params`) spread in;
- `InferenceHTTPClient.chat_completion` sends it (plain JSON, NO Authorization header, raises on non-2xx), one
  thread per window as head's `_generate`;
- `qwentrend_reward_parser` (`_parse_qwentrend_output`, `QwentrendRewardParser.parse_rewards`) reads
  `choices[0].message.content`.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from django.test import override_settings

from tests.conftest import _spawn, _stop, _wait_for_port, free_port
from tests.interop.conftest import side_run

from .conftest import deploy

MIRRORS = "side_rlinf_mirrors.py"
TASK = "pick up the red cube"
RLINF_PROMPT = (  # RLinf 0.3.0's qwentrend prompt for TASK: what the tiny model is deployed as trained with
    f"You are currently performing the task: {TASK}. "
    "You are given two synchronized 5-frame videos from different camera "
    "views (main view and third-person view) of the same robot action "
    "window. Judge whether the action trend is positive, negative, or "
    "unclear. Answer with exactly one word: positive, negative, or unclear."
)
SAMPLING = {"max_tokens": 16, "temperature": 0}


def rlinf_windows(folder: Path, n: int, seed: int = 0) -> str:
    """n env windows (two 5-frame 32x32 videos each) saved as an .npy for the side environment; its path."""
    frames = np.random.default_rng(seed).integers(0, 256, (n, 2, 5, 32, 32, 3), dtype=np.uint8)
    path = folder / f"windows_{n}_{seed}_{uuid.uuid4().hex[:6]}.npy"
    np.save(path, frames)
    return str(path)


def rlinf_chat_payloads(folder: Path, n: int, model: str) -> list[dict]:
    """The chat bodies for n windows, from RLinf 0.3.0's qwentrend input builder (see the module)."""
    args: dict[str, Any] = {
        "frames": rlinf_windows(folder, n),
        "task": TASK,
        "model": model,
        "sampling_params": SAMPLING,
    }
    return side_run("chat_payloads", runner=MIRRORS, **args)["payloads"]


def rlinf_chat_burst(folder: Path, base_url: str, n: int, model: str) -> list[list]:
    """n windows' requests at once from RLinf 0.3.0's InferenceHTTPClient: [status, seconds, text, answer]."""
    args: dict[str, Any] = {
        "frames": rlinf_windows(folder, n),
        "task": TASK,
        "model": model,
        "sampling_params": SAMPLING,
    }
    return side_run("chat_burst", runner=MIRRORS, base_url=base_url, full=True, **args)["results"]


@pytest.fixture(scope="module")
def trusted_server_url(process_env):
    """A second ASGI server whose settings trust loopback (TRUSTED_CIDRS=127.0.0.1/32)."""
    port = free_port()
    env = {**process_env, "TRUSTED_CIDRS": "127.0.0.1/32"}
    args = ["-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    proc = _spawn([__import__("sys").executable, *args, "--log-level", "warning"], env, f"uvicorn-trusted-{port}.log")
    try:
        _wait_for_port(port, proc)
        requests.get(f"http://127.0.0.1:{port}/healthz", timeout=120)  # Django loaded: later calls are quick
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


@pytest.fixture
def vlm_model(project):
    from django.core.files.storage import default_storage

    from training.models import TrainedModel
    from training.vlm.fixture import build_tiny_qwen3_vl

    name = f"checkpoints/vlm_{uuid.uuid4().hex[:8]}"
    build_tiny_qwen3_vl(default_storage.path(name))
    return TrainedModel.objects.create(
        project=project, kind="vlm", name="tiny-qwen3-vl", checkpoint_path=name, config={"prompt": RLINF_PROMPT}
    )


def worker_counts() -> tuple[int, int]:
    import redis
    from django.conf import settings

    from inference.broker import WORKERS_KEY

    beats = redis.Redis.from_url(settings.REDIS_URL).hgetall(WORKERS_KEY)
    items = sum(json.loads(v).get("items", 0) for v in beats.values())  # windows (concurrent ones may share a request)
    batches = sum(json.loads(v).get("batches", 0) for v in beats.values())
    return items, batches


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_rlinf_payload_from_a_trusted_address_needs_no_token(
    project, vlm_model, trusted_server_url, live_server_url, inference_worker_process, tmp_path
):
    # RLinf names the model by the base model folder; the deployment carries it as an alias (any case)
    deployment = deploy(vlm_model, aliases=["qwen3-vl-4b-instruct"], max_wait_ms=50.0)
    assert requests.get(f"{trusted_server_url}/health", timeout=5, proxies={}).status_code == 200

    warm = rlinf_chat_burst(tmp_path, trusted_server_url, 1, "Qwen3-VL-4B-Instruct")  # the worker loads the model
    assert warm[0][0] == 200, warm
    time.sleep(1.2)  # a fresh heartbeat carries the counters
    served_before, batches_before = worker_counts()
    results = rlinf_chat_burst(tmp_path, trusted_server_url, 8, "Qwen3-VL-4B-Instruct")
    assert [r[0] for r in results] == [200] * 8, results

    replies = [r[3] for r in results]
    parsed = side_run("qwentrend_parse", runner=MIRRORS, texts=[r[2] for r in results])
    for reply, label, reward in zip(replies, parsed["labels"], parsed["rewards"], strict=True):
        assert reply["model"] == deployment.name
        assert reply["reward_studio"]["label"] == (label or "invalid")  # RLinf's parser reads what we parsed
        assert reply["reward_studio"]["reward"] == pytest.approx(reward, abs=1e-6)  # and gives the same reward
        usage = reply["usage"]
        assert usage["prompt_tokens"] > 10 * 4  # ten images of at least a few tokens each, plus the prompt
        assert 1 <= usage["completion_tokens"] <= 16
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert len({r["usage"]["prompt_tokens"] for r in replies}) == 1  # same window shape, same prompt
    time.sleep(1.2)
    served_after, batches_after = worker_counts()
    assert served_after - served_before >= 8
    assert batches_after - batches_before < served_after - served_before  # some windows shared a forward pass

    # the same call to a server that trusts no network: 401, which RLinf's client raises
    (refused,) = rlinf_chat_burst(tmp_path, live_server_url, 1, "Qwen3-VL-4B-Instruct")
    assert refused[0] == 401, refused
    assert requests.get(f"{live_server_url}/health", timeout=30).status_code == 401


@pytest.mark.django_db
def test_trusted_list_excluding_the_caller_gets_401_and_tokens_are_still_judged(client, vlm_model, tmp_path):
    deploy(vlm_model, aliases=["Qwen3-VL-4B-Instruct"])
    (body,) = rlinf_chat_payloads(tmp_path, 1, "qwen3-vl-4b-instruct")
    url = "/v1/chat/completions"
    with override_settings(TRUSTED_CIDRS=["10.0.0.0/8"]):
        untrusted = client.post(url, body, content_type="application/json", REMOTE_ADDR="127.0.0.1")
        assert untrusted.status_code == 401
        assert untrusted.json()["error"]["code"] == 401
        assert client.get("/health", REMOTE_ADDR="127.0.0.1").status_code == 401
        # from inside the listed network the request passes authentication (then: no such model)
        missing = client.post(url, {**body, "model": "nope"}, content_type="application/json", REMOTE_ADDR="10.1.2.3")
        assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]
        # a request that carries a token is judged by it, wherever it comes from
        wrong = client.post(
            url, body, content_type="application/json", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer rs_bad"
        )
        assert wrong.status_code == 401
    with override_settings(TRUSTED_CIDRS=[]):
        assert client.post(url, body, content_type="application/json", REMOTE_ADDR="10.1.2.3").status_code == 401


def test_address_checks():
    from common.trusted_networks import address_trusted, networks_parse

    nets = networks_parse(["127.0.0.1", "10.0.0.0/8", "::1/128"])
    assert address_trusted("127.0.0.1", nets) and address_trusted("10.200.0.1", nets)
    assert address_trusted("::1", nets) and address_trusted("::ffff:10.0.0.7", nets)
    assert not address_trusted("127.0.0.2", nets) and not address_trusted("11.0.0.1", nets)
    assert not address_trusted("", nets) and not address_trusted("not-an-ip", nets)
    assert not address_trusted("127.0.0.1", [])
    with pytest.raises(ValueError, match="'10.0.0.300/8' is not an IP network"):
        networks_parse(["10.0.0.300/8"])
