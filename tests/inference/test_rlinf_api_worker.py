"""RLinf's API reward worker, unchanged, against a real inference worker on the tiny Qwen3-VL.

What RLinf sends (rlinf/workers/reward/api_reward_worker.py, commit a3816b5): one chat-completions request
per window, built by `_build_chat_payloads` (lines 152-180): every frame of the main then the extra video as a
`data:image/jpeg;base64` `image_url` part (JPEG quality 95, `_frame_to_data_url` lines 125-150), then one text
part with the prompt; `model` = `reward.api.model`, else the base model folder's name (lines 97-101); the
sampling params (`max_tokens` 16, `temperature` 0 in its example config) spread into the body. Requests go
concurrently, one thread per window (`_generate`, lines 192-207), through `InferenceHTTPClient.post`
(rlinf/utils/http_client.py): plain JSON, NO Authorization header; any non-2xx status raises. Its
`health()` counts only a 200 from `GET /health`. Answers are read from `choices[0].message.content`
(`_extract_text`, lines 182-190) by `VLMTrendRewardParser`
(rlinf/models/embodiment/reward/vlm_reward_utils/reward_parser.py:50-81, 105-134).
"""

from __future__ import annotations

import base64
import io
import json
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
from django.test import override_settings
from PIL import Image

from tests.conftest import _spawn, _stop, _wait_for_port, free_port

from .conftest import deploy

RLINF_PROMPT = (
    "You are currently performing the task: pick up the red cube. "
    "You are given two synchronized 5-frame videos from different camera "
    "views (main view and third-person view) of the same robot action "
    "window. Judge whether the action trend is positive, negative, or "
    "unclear. Answer with exactly one word: positive, negative, or unclear."
)
RLINF_REWARDS = {"positive": 1.0, "negative": -0.2, "unclear": 0.0, None: 0.0}


def rlinf_trend_parse(text: str) -> str | None:
    """RLinf's rules (reward_parser.py:50-81): the whole text as JSON, else the span from the first `{` to
    the last `}`; its `trend` if a valid label; else the last whole-word label in the lower-cased text."""
    stripped, obj = text.strip(), None
    try:
        obj = json.loads(stripped)
    except ValueError:
        start, end = stripped.find("{"), stripped.rfind("}")
        if 0 <= start < end:
            try:
                obj = json.loads(stripped[start : end + 1])
            except ValueError:
                obj = None
    if isinstance(obj, dict) and str(obj.get("trend", "")).strip().lower() in ("positive", "negative", "unclear"):
        return str(obj["trend"]).strip().lower()
    matches = re.findall(r"\b(positive|negative|unclear)\b", stripped.lower())
    return matches[-1] if matches else None


def jpeg_data_url(frame: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(frame, mode="RGB").save(buffer, format="JPEG", quality=95)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def rlinf_payload(seed: int, model: str) -> dict:
    rng = np.random.default_rng(seed)
    videos = [[rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(5)] for _ in range(2)]
    content = [{"type": "image_url", "image_url": {"url": jpeg_data_url(f)}} for video in videos for f in video]
    content.append({"type": "text", "text": RLINF_PROMPT})
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 16, "temperature": 0}


def rlinf_post(base_url: str, body: dict) -> dict:
    """InferenceHTTPClient.post as RLinf calls it: JSON, no token, proxies off; non-2xx is an error."""
    response = requests.post(f"{base_url}/v1/chat/completions", json=body, timeout=(120, 120), proxies={})
    if not response.ok:
        raise RuntimeError(f"status={response.status_code}, body={response.text[:500]}")
    return response.json()


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
    project, vlm_model, trusted_server_url, live_server_url, inference_worker_process
):
    # RLinf names the model by the base model folder; the deployment carries it as an alias (any case)
    deployment = deploy(vlm_model, aliases=["qwen3-vl-4b-instruct"], max_wait_ms=50.0)
    assert requests.get(f"{trusted_server_url}/health", timeout=5, proxies={}).status_code == 200

    payloads = [rlinf_payload(seed, "Qwen3-VL-4B-Instruct") for seed in range(8)]
    rlinf_post(trusted_server_url, payloads[0])  # the worker loads the model
    time.sleep(1.2)  # a fresh heartbeat carries the counters
    served_before, batches_before = worker_counts()
    with ThreadPoolExecutor(max_workers=len(payloads)) as pool:
        replies = list(pool.map(lambda body: rlinf_post(trusted_server_url, body), payloads))

    for reply in replies:
        text = reply["choices"][0]["message"]["content"]
        label = rlinf_trend_parse(text)
        assert reply["model"] == deployment.name
        ours = reply["reward_studio"]["label"]
        assert (label or "invalid") == ours
        assert reply["reward_studio"]["reward"] == pytest.approx(RLINF_REWARDS[label])
        usage = reply["usage"]
        assert usage["prompt_tokens"] > 10 * 4  # ten images of at least a few tokens each, plus the prompt
        assert 1 <= usage["completion_tokens"] <= 16
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert len({r["usage"]["prompt_tokens"] for r in replies}) == 1  # same window shape, same prompt
    time.sleep(1.2)
    served_after, batches_after = worker_counts()
    assert served_after - served_before >= 8
    assert batches_after - batches_before < served_after - served_before  # some windows shared a forward pass

    # the same call to a server that trusts no network: 401, and RLinf's client raises
    with pytest.raises(RuntimeError, match="status=401"):
        rlinf_post(live_server_url, payloads[0])
    assert requests.get(f"{live_server_url}/health", timeout=30).status_code == 401


@pytest.mark.django_db
def test_trusted_list_excluding_the_caller_gets_401_and_tokens_are_still_judged(client, vlm_model):
    deploy(vlm_model, aliases=["Qwen3-VL-4B-Instruct"])
    body = rlinf_payload(0, "qwen3-vl-4b-instruct")
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
    from webapp.common.trusted_networks import address_trusted, networks_parse

    nets = networks_parse(["127.0.0.1", "10.0.0.0/8", "::1/128"])
    assert address_trusted("127.0.0.1", nets) and address_trusted("10.200.0.1", nets)
    assert address_trusted("::1", nets) and address_trusted("::ffff:10.0.0.7", nets)
    assert not address_trusted("127.0.0.2", nets) and not address_trusted("11.0.0.1", nets)
    assert not address_trusted("", nets) and not address_trusted("not-an-ip", nets)
    assert not address_trusted("127.0.0.1", [])
    with pytest.raises(ValueError, match="'10.0.0.300/8' is not an IP network"):
        networks_parse(["10.0.0.300/8"])
