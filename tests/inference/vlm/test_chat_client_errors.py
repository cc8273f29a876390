"""A window the deployed model's layout cannot take is the client's error: chat completions and the VLM
rewards endpoint answer 400 with the reason (was 503 "scoring failed: WireError ..."), through a real
inference worker that keeps serving the next, well-formed window."""

from __future__ import annotations

import pytest
import requests

from inference.broker import Reply, RequestRejected
from training.vlm.labels import LABELS

from ..conftest import deploy
from .test_layout_api import frames, png_url, register

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_rejected_reply_travels_as_such():
    reply = Reply.decode(Reply(None, "two videos", 3, "w1", rejected=True).encode())
    assert reply.rejected and reply.error == "two videos"
    with pytest.raises(RequestRejected, match="two videos"):
        reply.unwrap()
    assert not Reply.decode(Reply([1.0], "", 3, "w1").encode()).rejected


def chat(url: str, token: str, model: str, images: list) -> requests.Response:
    content = [{"type": "image_url", "image_url": {"url": png_url(f)}} for f in images]
    body = {"model": model, "messages": [{"role": "user", "content": [*content, {"type": "text", "text": "?"}]}]}
    return requests.post(
        f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=120
    )


def test_a_window_the_video_model_cannot_take_is_a_400(project, live_server_url, inference_worker_process):
    from projects.services import agent_create

    token = agent_create(name="rl-errors", kind="rl_worker", projects=[project])[1]
    deployment = deploy(register(project, "video"))
    for images, why in (
        (frames(1, 1), "got 1 images"),  # one view only
        (frames(3, 2), "got 3 images"),  # views of unequal length
        (frames(2, 3), "at least 2 frames each"),  # one frame a video: shorter than the processor's groups
    ):
        answer = chat(live_server_url, token, deployment.name, images)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error" and "two videos" in error["message"], error
        assert why in error["message"], error
    f = frames(1, 4)[0]  # a window of one step: one frame a view
    rest = requests.post(
        f"{live_server_url}/api/deployments/{deployment.name}/vlm/rewards",
        json={"windows": [{"main": [png_url(f).split(",", 1)[1]], "extra": [png_url(f).split(",", 1)[1]]}]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    )
    assert rest.status_code == 400 and "two videos" in rest.text, rest.text
    good = chat(live_server_url, token, deployment.name, frames(10, 5))  # the worker goes on serving
    assert good.status_code == 200, good.text
    assert set(good.json()["reward_studio"]["probabilities"]) == set(LABELS)
