"""A deployed tiny Qwen3-VL scores a window in the model's input layout on every serving path, through a
real inference worker: for a `video` model (RLinf's two videos, `rlinf/data/datasets/vlm/vlm_trend_reward.py`)
the window posted to the chat endpoint as 10 image parts (RLinf's API reward worker,
`rlinf/workers/reward/api_reward_worker.py`) and the same window posted as two video parts give identical
label probabilities, equal to the REST windows endpoint and to the model run in this process; an `images`
model is served on separate images."""

from __future__ import annotations

import base64
import io
import uuid

import numpy as np
import pytest
import requests
from PIL import Image

from training.vlm.labels import LABELS

from ..conftest import deploy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def frames(n: int, seed: int, size: int = 32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(n)]


def png_url(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.fixture
def token(project):
    from projects.services import agent_create

    return agent_create(name="rl-layout", kind="rl_worker", projects=[project])[1]


def register(project, layout: str | None):
    from django.core.files.storage import default_storage

    from training.models import TrainedModel
    from training.vlm.fixture import build_tiny_qwen3_vl
    from training.vlm.prompt import prompt_render

    name = f"checkpoints/vlm_{uuid.uuid4().hex[:8]}"
    build_tiny_qwen3_vl(default_storage.path(name))
    config = {"prompt": prompt_render(project.prompt_template, task=project.task_description, window_size=5)}
    if layout:
        config["input_layout"] = layout
    return TrainedModel.objects.create(project=project, kind="vlm", name="tiny", checkpoint_path=name, config=config)


def chat(url: str, token: str, model: str, content: list[dict]) -> dict:
    response = requests.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()["reward_studio"]


def local_probabilities(trained_model, layout: str, images, prompt: str) -> np.ndarray:
    import torch

    from training.storage import local_path
    from training.vlm.checkpoint import checkpoint_load
    from training.vlm.scoring import ScoreItem, TrendScorer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, processor, _ = checkpoint_load(local_path(trained_model.checkpoint_path), device="cpu")
        return TrendScorer(model, processor, layout=layout).probabilities([ScoreItem(images, prompt)])[0]
    finally:
        torch.set_num_threads(threads)


def test_video_model_scores_ten_image_parts_and_two_videos_identically(
    project, token, live_server_url, inference_worker_process
):
    trained = register(project, None)  # no layout recorded: the default, RLinf's videos
    deployment = deploy(trained)
    main, extra = frames(5, 11), frames(5, 12)
    prompt = trained.config["prompt"]
    as_images = [{"type": "image_url", "image_url": {"url": png_url(f)}} for f in [*main, *extra]]
    as_videos = [
        {"type": "video", "video": [png_url(f) for f in main]},
        {"type": "video", "video": [png_url(f) for f in extra]},
    ]
    text = {"type": "text", "text": prompt}
    by_images = chat(live_server_url, token, deployment.name, [*as_images, text])["probabilities"]
    by_videos = chat(live_server_url, token, deployment.name, [*as_videos, text])["probabilities"]
    assert by_images == by_videos
    expected = local_probabilities(trained, "video", [*main, *extra], prompt)
    np.testing.assert_allclose([by_images[k] for k in LABELS], expected, atol=1e-5)
    assert not np.allclose(expected, local_probabilities(trained, "images", [*main, *extra], prompt), atol=1e-4)

    # the REST windows endpoint takes the same window to the same model input
    body = {
        "windows": [
            {"main": [png_url(f).split(",", 1)[1] for f in main], "extra": [png_url(f).split(",", 1)[1] for f in extra]}
        ]
    }
    response = requests.post(
        f"{live_server_url}/api/deployments/{deployment.name}/vlm/rewards",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    rest = response.json()["items"][0]["probabilities"]
    np.testing.assert_allclose([rest[k] for k in LABELS], expected, atol=1e-5)

    # two videos of different lengths are not a window
    bad = [as_videos[0], {"type": "video", "video": [png_url(f) for f in extra[:4]]}, text]
    response = requests.post(
        f"{live_server_url}/v1/chat/completions",
        json={"model": deployment.name, "messages": [{"role": "user", "content": bad}]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert response.status_code == 400 and "two video parts" in response.text


def test_images_model_is_served_on_separate_images(project, token, live_server_url, inference_worker_process):
    trained = register(project, "images")
    deployment = deploy(trained)
    main, extra = frames(5, 21), frames(5, 22)
    prompt = trained.config["prompt"]
    content = [{"type": "image_url", "image_url": {"url": png_url(f)}} for f in [*main, *extra]]
    got = chat(live_server_url, token, deployment.name, [*content, {"type": "text", "text": prompt}])["probabilities"]
    expected = local_probabilities(trained, "images", [*main, *extra], prompt)
    np.testing.assert_allclose([got[k] for k in LABELS], expected, atol=1e-5)
