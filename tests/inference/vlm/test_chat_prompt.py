"""No silent prompt change: a chat request's text is compared with the prompt the model was trained on; the
deployment's `chat_prompt` says which of the two judges it; the response and the deployments page say when the
request's task differs (a real inference worker on the tiny Qwen3-VL, real Redis)."""

from __future__ import annotations

import base64
import io
import uuid

import numpy as np
import pytest
from PIL import Image

from inference.vlm.chat_prompt import REQUEST, TRAINED, chat_prompt_pick
from projects.prompts import REWARD_STUDIO_PROMPT_TEMPLATE, RLINF_TREND_PROMPT_TEMPLATE
from training.vlm.prompt import prompt_render, prompt_task

from ..conftest import deploy

OURS = "Pick up the red cube."
RLINF_TASK = "Pick up the red cube and place it on the green spot on the table."  # RLinf's default_task_description
TRAINED_PROMPT = prompt_render(RLINF_TREND_PROMPT_TEMPLATE, task=OURS, window_size=5)
RLINF_PROMPT = prompt_render(RLINF_TREND_PROMPT_TEMPLATE, task=RLINF_TASK, window_size=5)


def pick(text, use=TRAINED):
    return chat_prompt_pick(
        text, trained=TRAINED_PROMPT, use=use, template=RLINF_TREND_PROMPT_TEMPLATE, trained_task=OURS, window_size=5
    )


def test_the_task_inside_a_prompt_is_read_back_through_its_template():
    assert prompt_task(RLINF_TREND_PROMPT_TEMPLATE, RLINF_PROMPT, window_size=5) == RLINF_TASK
    assert prompt_task(RLINF_TREND_PROMPT_TEMPLATE, "What do you see?", window_size=5) is None
    ours = prompt_render(REWARD_STUDIO_PROMPT_TEMPLATE, task="Open the drawer", window_size=8)
    assert prompt_task(REWARD_STUDIO_PROMPT_TEMPLATE, ours, window_size=8) == "Open the drawer"
    assert prompt_task(REWARD_STUDIO_PROMPT_TEMPLATE, ours, window_size=5) is None  # another window size


def test_which_prompt_judges_a_request_and_whether_it_differs():
    same = pick("  " + TRAINED_PROMPT.replace(". ", ".\n") + " ")  # whitespace alone is no difference
    assert (same.prompt, same.judged_with, same.differs) == (TRAINED_PROMPT, TRAINED, False)
    other = pick(RLINF_PROMPT)
    assert (other.prompt, other.judged_with, other.differs, other.request_task) == (
        TRAINED_PROMPT,
        TRAINED,
        True,
        RLINF_TASK,
    )
    asked = pick(RLINF_PROMPT, use=REQUEST)
    assert (asked.prompt, asked.judged_with, asked.differs) == (RLINF_PROMPT, REQUEST, True)
    none = pick(None, use=REQUEST)
    assert (none.prompt, none.judged_with, none.differs, none.request_task) == (TRAINED_PROMPT, TRAINED, False, None)
    with pytest.raises(ValueError, match="chat_prompt must be"):
        pick("x", use="mine")


def png_url(frame: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def chat(client, name: str, text: str | None) -> dict:
    rng = np.random.default_rng(3)
    content: list[dict] = [
        {"type": "image_url", "image_url": {"url": png_url(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))}}
        for _ in range(10)
    ]
    if text is not None:
        content.append({"type": "text", "text": text})
    body = {"model": name, "messages": [{"role": "user", "content": content}], "max_tokens": 4}
    response = client.post("/v1/chat/completions", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_rlinfs_task_text_is_reported_and_judges_only_when_the_deployment_says_so(
    project, agent_client, user_client, inference_worker_process
):
    from django.core.files.storage import default_storage

    from inference.serving import sync_redis
    from inference.vlm.prompt_notes import PREFIX, forget_prompt_notes
    from training.models import TrainedModel
    from training.vlm.fixture import build_tiny_qwen3_vl

    name = f"checkpoints/vlm_{uuid.uuid4().hex[:8]}"
    build_tiny_qwen3_vl(default_storage.path(name))
    model = TrainedModel.objects.create(
        project=project,
        kind="vlm",
        name="tiny-qwen3-vl",
        checkpoint_path=name,
        config={"prompt_template": RLINF_TREND_PROMPT_TEMPLATE, "task": OURS, "window_size": 5},
    )
    deployment = deploy(model, max_wait_ms=0.0)
    assert deployment.chat_prompt == "trained"
    forget_prompt_notes()
    sync_redis().delete(f"{PREFIX}{deployment.pk}")  # a key left by an earlier run whose ids were reused

    trained = chat(agent_client, deployment.name, TRAINED_PROMPT)
    assert trained["reward_studio"]["prompt"] == {
        "judged_with": "trained",
        "differs": False,
        "trained_task": OURS,
        "request_task": OURS,
    }
    assert 'class="error prompt-mismatch"' not in user_client.get("/deployments/").content.decode()

    theirs = chat(agent_client, deployment.name, RLINF_PROMPT)
    assert theirs["reward_studio"]["prompt"] == {
        "judged_with": "trained",
        "differs": True,
        "trained_task": OURS,
        "request_task": RLINF_TASK,
    }
    # judged with the trained prompt: the very same inputs as the request that sent it
    assert theirs["reward_studio"]["probabilities"] == trained["reward_studio"]["probabilities"]
    assert theirs["usage"]["prompt_tokens"] == trained["usage"]["prompt_tokens"]
    page = user_client.get("/deployments/").content.decode()
    assert f'id="prompt-mismatch-{deployment.name}">1 chat request(s) sent a task other than the trained one' in page
    assert RLINF_TASK[:60] in page and "judged with the trained prompt" in page

    response = user_client.patch(
        f"/api/deployments/{deployment.name}/", {"chat_prompt": "mine"}, content_type="application/json"
    )
    assert response.status_code == 400 and "chat_prompt" in response.json()["errors"]
    response = user_client.patch(
        f"/api/deployments/{deployment.name}/", {"chat_prompt": "request"}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    asked = chat(agent_client, deployment.name, RLINF_PROMPT)
    assert asked["reward_studio"]["prompt"]["judged_with"] == "request" and asked["reward_studio"]["prompt"]["differs"]
    assert asked["usage"]["prompt_tokens"] != trained["usage"]["prompt_tokens"]  # RLinf's longer task text
    assert chat(agent_client, deployment.name, None)["reward_studio"]["prompt"]["judged_with"] == "trained"
    page = user_client.get("/deployments/").content.decode()
    assert "chat judged with the request's prompt" in page
    assert "chat request(s) sent a task other than the trained one" in page
