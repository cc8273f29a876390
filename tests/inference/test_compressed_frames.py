"""JSON reward requests with JPEG/PNG frames, decoded by the web process (INFERENCE_DECODE_COMPRESSED=web) or
forwarded compressed and decoded by the inference worker on its device (worker): the same rewards either way,
the web process decoding nothing in the second, and a frame that will not decode failing its own request only."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from .conftest import deploy, direct_probabilities, make_trained_model, random_images

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _encoded(frames: np.ndarray) -> list[str]:
    """PNG and JPEG in turn, base64."""
    out = []
    for i, frame in enumerate(frames):
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="JPEG" if i % 2 else "PNG", quality=95)
        out.append(base64.b64encode(buffer.getvalue()).decode())
    return out


def _post(agent_client, deployment, images: list[str]):
    return agent_client.post(f"/api/deployments/{deployment.name}/rewards", {"images": images}, format="json")


def test_frames_decoded_by_the_worker_score_as_frames_decoded_by_the_web(
    agent_client, project, settings, inference_worker_process, monkeypatch
):
    from inference.wire import payloads

    model = make_trained_model(project, seed=6)
    deployment = deploy(model)
    frames = random_images(4, seed=8)
    images = _encoded(frames)
    settings.INFERENCE_DECODE_COMPRESSED = "web"
    by_web = _post(agent_client, deployment, images)
    assert by_web.status_code == 200, by_web.content

    settings.INFERENCE_DECODE_COMPRESSED = "worker"
    monkeypatch.setattr(payloads, "decode_rgb", _never_called)  # the web process decodes no frame
    by_worker = _post(agent_client, deployment, images)
    assert by_worker.status_code == 200, by_worker.content

    web = [item["probability"] for item in by_web.json()["items"]]
    worker = [item["probability"] for item in by_worker.json()["items"]]
    np.testing.assert_allclose(worker, web, atol=2e-3)  # JPEG decoders may differ by a level here and there
    decoded = np.stack([np.asarray(Image.open(io.BytesIO(base64.b64decode(i))).convert("RGB")) for i in images])
    np.testing.assert_allclose(web, direct_probabilities(model.checkpoint_path, decoded), atol=1e-5)


def test_a_frame_the_worker_cannot_decode_fails_its_own_request(
    agent_client, project, settings, inference_worker_process
):
    model = make_trained_model(project, seed=7)
    deployment = deploy(model)
    settings.INFERENCE_DECODE_COMPRESSED = "worker"
    good = _encoded(random_images(2, seed=3))
    jpeg = base64.b64decode(good[1])
    broken = base64.b64encode(jpeg[:200] + b"\x00" * (len(jpeg) - 200)).decode()  # header intact, data gone
    response = _post(agent_client, deployment, [good[1], broken])
    assert response.status_code == 503, response.content
    assert "scoring failed" in response.json()["detail"]
    assert _post(agent_client, deployment, [good[1], good[1]]).status_code == 200


def _never_called(*args, **kwargs):
    raise AssertionError("the web process decoded a frame")
