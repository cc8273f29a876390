"""A deployed tiny Qwen3-VL served through a real inference worker: trend rewards over REST (windows and
history_vlm streams) and the OpenAI-compatible endpoint driven by the official `openai` client."""

from __future__ import annotations

import base64
import io
import uuid

import numpy as np
import pytest
import requests
from PIL import Image

from tests.labeling.broken_pngs import broken_png
from training.vlm.labels import LABELS
from training.vlm.parse import label_parse

from ..conftest import deploy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Hand-chosen label mapping (distinct per label, so a wrong label shows up in the reward).
LABEL_REWARDS = {"positive": 3.0, "negative": -2.0, "unclear": 0.5, "invalid": -0.1}


@pytest.fixture
def rl_token(db):
    from projects.services import agent_create

    return agent_create(name="rl-vlm", kind="rl_worker", all_projects=True)[1]


@pytest.fixture
def vlm_model(project):
    from django.core.files.storage import default_storage

    from training.models import TrainedModel
    from training.vlm.fixture import build_tiny_qwen3_vl
    from training.vlm.prompt import prompt_render

    name = f"checkpoints/vlm_{uuid.uuid4().hex[:8]}"
    build_tiny_qwen3_vl(default_storage.path(name))
    # a base model registered for serving carries the prompt it is served with, as trained models do
    prompt = prompt_render(project.prompt_template, task=project.task_description, window_size=5)
    return TrainedModel.objects.create(
        project=project, kind="vlm", name="tiny-qwen3-vl", checkpoint_path=name, config={"prompt": prompt}
    )


@pytest.fixture
def direct(vlm_model, project):
    """The same model loaded in this process, with the prompt the deployment serves, on one torch thread
    like the worker (same arithmetic, so greedy texts match exactly)."""
    import torch

    from training.storage import local_path
    from training.vlm.checkpoint import checkpoint_load
    from training.vlm.prompt import prompt_render
    from training.vlm.scoring import ScoreItem, TrendScorer

    model, processor, _ = checkpoint_load(local_path(vlm_model.checkpoint_path), device="cpu")
    scorer = TrendScorer(model, processor)
    prompt = prompt_render(project.prompt_template, task=project.task_description, window_size=5)

    class Direct:
        def probabilities(self, images_list, text=prompt):
            return scorer.probabilities([ScoreItem(images, text) for images in images_list])

        def generate(self, images, text=prompt, max_new_tokens=16):
            return scorer.generate([ScoreItem(images, text)], max_new_tokens=max_new_tokens)[0]

    Direct.prompt = prompt
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield Direct()
    torch.set_num_threads(threads)


def frames(n: int, seed: int, size: int = 32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(n)]


def b64png(array: np.ndarray, data_url: bool = False) -> str:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    text = base64.b64encode(buffer.getvalue()).decode()
    return f"data:image/png;base64,{text}" if data_url else text


def post(url: str, token: str | None, body: dict):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.post(url, json=body, headers=headers, timeout=60)


def test_window_rewards_match_the_model_and_the_label_mapping(
    project, vlm_model, direct, rl_token, live_server_url, inference_worker_process
):
    deployment = deploy(vlm_model, env_reward_weight=0.5, reward_weight=2.0)
    windows = [(frames(5, seed), frames(5, seed + 100)) for seed in range(3)]
    env = [(1.0, False), (0.0, True), (-1.0, False)]
    body = {
        "windows": [
            {"main": [b64png(f) for f in main], "extra": [b64png(f) for f in extra], "env_reward": r, "env_success": s}
            for (main, extra), (r, s) in zip(windows, env, strict=True)
        ],
        "label_rewards": LABEL_REWARDS,
        "gt_success_bonus": 20.0,
    }
    response = post(f"{live_server_url}/api/deployments/{deployment.name}/vlm/rewards", rl_token, body)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["reward_mode"] == "window" and data["prompt"] == direct.prompt
    expected = direct.probabilities([[*main, *extra] for main, extra in windows])
    for item, probs, (env_reward, success) in zip(data["items"], expected, env, strict=True):
        got = np.array([item["probabilities"][label] for label in LABELS])
        np.testing.assert_allclose(got, probs, atol=1e-5)
        label = LABELS[int(np.argmax(probs))]
        assert item["label"] == label and item["scored"]
        output = LABEL_REWARDS[label] + (20.0 if success else 0.0)
        assert item["model_output"] == pytest.approx(output)
        assert item["reward"] == pytest.approx(0.5 * env_reward + 2.0 * output)

    # the compact form: one uint8 [B,2,T,H,W,3] .npy body, per-item values as query parameters
    array = np.stack([np.stack([np.stack(main), np.stack(extra)]) for main, extra in windows])
    buffer = io.BytesIO()
    np.save(buffer, array)
    response = requests.post(
        f"{live_server_url}/api/deployments/{deployment.name}/vlm/rewards",
        params={"env_rewards": "1,0,-1", "env_success": "0,1,0", "gt_success_bonus": "20"},
        data=buffer.getvalue(),
        headers={"Authorization": f"Bearer {rl_token}", "Content-Type": "application/x-npy"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    default = {"positive": 1.0, "negative": -0.2, "unclear": 0.0}
    for item, probs, (env_reward, success) in zip(response.json()["items"], expected, env, strict=True):
        np.testing.assert_allclose([item["probabilities"][k] for k in LABELS], probs, atol=1e-5)
        output = default[LABELS[int(np.argmax(probs))]] + (20.0 if success else 0.0)
        assert item["reward"] == pytest.approx(0.5 * env_reward + 2.0 * output)

    # greedy generation read by the parser decides the label when asked
    body = {"windows": body["windows"][:1], "generate": True, "max_new_tokens": 6, "label_rewards": LABEL_REWARDS}
    item = post(f"{live_server_url}/api/deployments/{deployment.name}/vlm/rewards", rl_token, body).json()["items"][0]
    text = direct.generate([*windows[0][0], *windows[0][1]], max_new_tokens=6)
    assert item["text"] == text and item["label"] == label_parse(text)
    assert item["reward"] == pytest.approx(0.5 * 1.0 + 2.0 * LABEL_REWARDS[label_parse(text)])


def _history_window(mains, extras, stream, start, end):
    """The stream's steps start..end as they are (RLinf pads nothing): main views, then extra views."""
    idx = list(range(start, end + 1))
    return [mains[stream][i] for i in idx] + [extras[stream][i] for i in idx]


def _stream_two_histories(url, rl_token, mains, extras):
    """Seven requests of one step each for streams a and b (b done at t=4), alternating RLinf's two names of
    the mode; returns each stream's items in order."""
    results = {"a": [], "b": []}
    for t in range(7):
        steps = [
            {"stream": s, "main": b64png(mains[s][t]), "extra": b64png(extras[s][t]), "done": s == "b" and t == 4}
            for s in "ab"
        ]
        mode = "buffered_vlm" if t % 2 else "history_vlm"  # RLinf's newer name is the same mode
        response = post(url, rl_token, {"reward_mode": mode, "steps": steps, "label_rewards": LABEL_REWARDS})
        assert response.status_code == 200, response.text
        for item in response.json()["items"]:
            results[item["stream"]].append(item)
    return results


def _check_several_steps_of_a_stream_in_one_request(url, rl_token, mains, extras, direct):
    """One request may carry several steps of one stream (they count in order) next to other streams."""
    steps = [
        {"stream": s, "main": b64png(mains["a"][t]), "extra": b64png(extras["a"][t]), "reset": t == 0}
        for t, s in [(0, "c"), (1, "c"), (0, "d"), (2, "c"), (3, "c")]
    ]
    items = post(url, rl_token, {"steps": steps}).json()["items"]
    assert [(i["stream"], i["step"], i["scored"]) for i in items] == [
        ("c", 0, False),
        ("c", 1, False),
        ("d", 0, False),
        ("c", 2, False),
        ("c", 3, True),
    ]
    np.testing.assert_allclose(
        [items[4]["probabilities"][k] for k in LABELS],
        direct.probabilities([_history_window(mains, extras, "a", 0, 3)])[0],
        atol=1e-5,
    )


def _check_the_compact_npy_form(url, rl_token, mains, extras, direct):
    """The compact form: uint8 [B,2,H,W,3] (one step per stream, both views) with stream names in the query."""
    for t in range(4):
        buffer = io.BytesIO()
        np.save(
            buffer, np.stack([np.stack([mains["a"][t], extras["a"][t]]), np.stack([mains["b"][t], extras["b"][t]])])
        )
        response = requests.post(
            url,
            params={"streams": "e,f"},
            data=buffer.getvalue(),
            headers={"Authorization": f"Bearer {rl_token}", "Content-Type": "application/x-npy"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert [(i["stream"], i["scored"]) for i in response.json()["items"]] == [("e", t == 3), ("f", t == 3)]
    np.testing.assert_allclose(
        [response.json()["items"][0]["probabilities"][k] for k in LABELS],
        direct.probabilities([_history_window(mains, extras, "a", 0, 3)])[0],
        atol=1e-5,
    )


def test_history_vlm_streams_buffer_steps_and_score_every_interval(
    project, vlm_model, direct, rl_token, live_server_url, inference_worker_process
):
    deployment = deploy(
        vlm_model,
        reward_mode="history_buffer",
        history_size=5,
        min_history_size=3,
        input_interval=2,
        interval_reward=0.25,
    )
    url = f"{live_server_url}/api/deployments/{deployment.name}/vlm/rewards"
    mains = {s: frames(7, 10 + i) for i, s in enumerate("ab")}
    extras = {s: frames(7, 20 + i) for i, s in enumerate("ab")}
    results = _stream_two_histories(url, rl_token, mains, extras)

    # RLinf's HistoryManager (rlinf/utils/env_helpers/history_manager.py:155-181): scored at counts that are
    # multiples of input_interval once min_history_size steps are held; stream b restarts after its done
    # step (count 5, not a multiple of 2, no input_on_done: not scored), then holds too few steps
    assert [i["scored"] for i in results["a"]] == [False, False, False, True, False, True, False]
    assert [i["scored"] for i in results["b"]] == [False, False, False, True, False, False, False]
    assert all(i["reward"] == 0.25 for i in results["a"] if not i["scored"])
    assert [i["window"] for i in results["a"]] == [0, 0, 0, 4, 0, 5, 0]

    _check_several_steps_of_a_stream_in_one_request(url, rl_token, mains, extras, direct)
    _check_the_compact_npy_form(url, rl_token, mains, extras, direct)

    windows = [("a", 0, 3), ("a", 1, 5), ("b", 0, 3)]
    expected = direct.probabilities([_history_window(mains, extras, *where) for where in windows])
    got = [results["a"][3], results["a"][5], results["b"][3]]
    for item, probs in zip(got, expected, strict=True):
        np.testing.assert_allclose([item["probabilities"][k] for k in LABELS], probs, atol=1e-5)
        assert item["reward"] == pytest.approx(LABEL_REWARDS[LABELS[int(np.argmax(probs))]])


def test_openai_client_gets_completions_from_the_chat_endpoint(
    project, vlm_model, direct, rl_token, live_server_url, inference_worker_process
):
    import openai

    deployment = deploy(vlm_model)
    main, extra = frames(5, 7), frames(5, 8)
    content = [{"type": "image_url", "image_url": {"url": b64png(f, data_url=True)}} for f in [*main, *extra]]
    content.append({"type": "text", "text": direct.prompt})
    client = openai.OpenAI(base_url=f"{live_server_url}/v1", api_key=rl_token, max_retries=0, timeout=60)

    completion = client.chat.completions.create(
        model=deployment.name, messages=[{"role": "user", "content": content}], max_tokens=8, temperature=0
    )
    text = completion.choices[0].message.content
    assert text == direct.generate([*main, *extra], max_new_tokens=8)
    extra_info = completion.model_extra["reward_studio"]
    label = label_parse(text)
    assert extra_info["label"] == label
    assert extra_info["reward"] == {"positive": 1.0, "negative": -0.2, "unclear": 0.0, "invalid": 0.0}[label]
    probs = direct.probabilities([[*main, *extra]])[0]
    np.testing.assert_allclose([extra_info["probabilities"][k] for k in LABELS], probs, atol=1e-5)

    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{live_server_url}/v1", api_key="wrong", max_retries=0).chat.completions.create(
            model=deployment.name, messages=[{"role": "user", "content": content}]
        )
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-deployment", messages=[{"role": "user", "content": content}])
    with pytest.raises(openai.BadRequestError, match="only base64 data URLs"):
        client.chat.completions.create(
            model=deployment.name,
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}],
        )


def test_parser_and_reward_mapping_hand_computed_cases():
    from training.vlm.rewards import TrendRewardConfig, trend_reward

    config = TrendRewardConfig(gt_success_bonus=20.0)
    cases = [
        ("positive", False, 1.0),
        ('{"trend": "negative"}', False, -0.2),
        ("It looks unclear to me.", True, 20.0),
        ("Progress: positive, then negative", True, 19.8),
        ("no idea", False, 0.0),
    ]
    for text, success, reward in cases:
        assert trend_reward(label_parse(text), config=config, env_success=success) == pytest.approx(reward)


def test_bad_vlm_requests_get_clear_4xx(project, vlm_model, rl_token, live_server_url, trained_model):
    deployment = deploy(vlm_model)
    url = f"{live_server_url}/api/deployments/{deployment.name}/vlm/rewards"
    window = {"main": [b64png(f) for f in frames(5, 1)], "extra": [b64png(f) for f in frames(5, 2)]}
    assert post(url, None, {"windows": [window]}).status_code == 401
    bad = post(url, rl_token, {"windows": [{**window, "main": ["not base64!"]}]})
    assert bad.status_code == 400 and "windows[0].main[0]" in bad.json()["detail"]
    broken = base64.b64encode(broken_png("corrupt stream", 32, 32)).decode()  # valid chunks, corrupt data
    bad = post(url, rl_token, {"windows": [{**window, "main": [broken] + window["main"][1:]}]})
    assert bad.status_code == 400 and bad.json()["detail"].startswith("windows[0].main[0]: undecodable image: ")
    neither = post(url, rl_token, {})
    assert neither.status_code == 400 and "either" in neither.json()["detail"]
    assert (
        post(f"{live_server_url}/api/deployments/nope/vlm/rewards", rl_token, {"windows": [window]}).status_code == 404
    )
    resnet = deploy(trained_model)
    wrong_kind = post(f"{live_server_url}/api/deployments/{resnet.name}/vlm/rewards", rl_token, {"windows": [window]})
    assert wrong_kind.status_code == 400 and "not a VLM" in wrong_kind.json()["detail"]
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((2, 3, 8, 8, 3), dtype=np.uint8))
    headers = {"Authorization": f"Bearer {rl_token}", "Content-Type": "application/x-npy"}
    wrong_shape = requests.post(url, data=buffer.getvalue(), headers=headers, timeout=30)
    assert wrong_shape.status_code == 400 and "[B,2,H,W,3]" in wrong_shape.json()["detail"]
    mapping = post(url, rl_token, {"windows": [window], "label_rewards": {"sideways": 1.0}})
    assert mapping.status_code == 400 and "unknown labels" in mapping.json()["detail"]


def test_live_frames_score_as_progress_probability_for_the_dashboard(
    project, vlm_model, direct, inference_worker_process
):
    """The teleop dashboard's scoring call (one frame per step) works on a VLM deployment: each stream's
    steps are buffered in Redis into a front-padded window, and P(positive) is the probability. Streams
    do not mix, whichever worker takes a step."""
    from asgiref.sync import async_to_sync

    from inference.teleop.scoring import score_frame

    deployment = deploy(vlm_model, threshold=0.4)
    steps = frames(2, 33)
    other = frames(1, 34)[0]
    scores = []
    for frame in steps:
        scores.append(async_to_sync(score_frame)(deployment.name, frame, timeout=60, stream="a"))
        async_to_sync(score_frame)(deployment.name, other, timeout=60, stream="b")  # interleaved stream
    window = [steps[0]] * 4 + [steps[1]]
    expected = direct.probabilities([window + window])[0]
    assert scores[1].probability == pytest.approx(float(expected[0]), abs=1e-5)
    assert scores[1].success == (scores[1].probability > 0.4)
