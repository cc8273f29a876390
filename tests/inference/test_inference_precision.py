"""A deployment's inference precision: set through the API, the admin and the deploy form, refused where the
model's family ignores it, a change reloads the model, and a real inference worker serves it (bf16 close to
fp32 on this CPU) or reports clearly what its device cannot run (fp16 on a CPU worker); packed JPEG/PNG frames
decoded by the worker."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from PIL import Image
from rest_framework.test import APIClient

from inference.models import Deployment
from reward_client import RewardClient

from .conftest import deploy, direct_probabilities, make_trained_model, random_images


@pytest.fixture
def staff(admin_user) -> APIClient:
    client = APIClient()
    client.force_login(admin_user)
    return client


@pytest.mark.django_db
def test_the_api_sets_the_precision_refuses_unknown_ones_and_a_change_reloads_the_model(staff, trained_model):
    created = staff.post(
        "/api/deployments/", {"name": "half", "trained_model": trained_model.pk, "inference_precision": "bf16"}
    )
    assert created.status_code == 201, created.json()
    assert created.json()["inference_precision"] == "bf16"
    version = created.json()["version"]
    default = staff.post("/api/deployments/", {"name": "full", "trained_model": trained_model.pk}, format="json")
    assert default.json()["inference_precision"] == "fp32"

    bad = staff.patch("/api/deployments/half/", {"inference_precision": "fp64"}, format="json")
    assert bad.status_code == 400 and "inference_precision" in str(bad.json()) and "fp64" in str(bad.json())
    same = staff.patch("/api/deployments/half/", {"inference_precision": "bf16"}, format="json")
    assert same.json()["version"] == version  # nothing changed: no reload
    changed = staff.patch("/api/deployments/half/", {"inference_precision": "fp32"}, format="json")
    assert changed.status_code == 200 and changed.json()["version"] > version
    assert changed.json()["status"] == "loading"


@pytest.mark.django_db
def test_fp16_is_refused_on_save_where_no_inference_worker_has_a_gpu_with_the_reason(staff, trained_model, monkeypatch):
    import json

    from inference.broker import WORKERS_KEY
    from inference.serving import sync_redis

    monkeypatch.delenv("INFERENCE_DEVICE", raising=False)
    redis = sync_redis()
    redis.delete(WORKERS_KEY)
    refused = staff.post(
        "/api/deployments/", {"name": "half", "trained_model": trained_model.pk, "inference_precision": "fp16"}
    )
    assert refused.status_code == 400 and not Deployment.objects.filter(name="half").exists()
    detail = refused.json()["detail"]
    assert "needs an inference worker on a GPU" in detail and "choose bf16 or fp32" in detail
    assert "INFERENCE_DEVICE=cpu" in detail
    created = staff.post("/api/deployments/", {"name": "half", "trained_model": trained_model.pk}, format="json")
    assert created.status_code == 201
    try:  # a live worker on the CPU: refused, naming its device; one on a GPU: accepted
        redis.hset(WORKERS_KEY, "cpu-worker", json.dumps({"at": time.time(), "device": "cpu", "models": {}}))
        cpu = staff.patch("/api/deployments/half/", {"inference_precision": "fp16"}, format="json")
        assert cpu.status_code == 400 and "the CPU (cpu)" in cpu.json()["detail"]
        redis.hset(WORKERS_KEY, "gpu-worker", json.dumps({"at": time.time(), "device": "cuda:0", "models": {}}))
        gpu = staff.patch("/api/deployments/half/", {"inference_precision": "fp16"}, format="json")
        assert gpu.status_code == 200 and gpu.json()["inference_precision"] == "fp16"
        redis.delete(WORKERS_KEY)  # a deployment already in fp16 keeps its other settings editable
        assert staff.patch("/api/deployments/half/", {"threshold": 0.6}, format="json").status_code == 200
    finally:
        redis.delete(WORKERS_KEY)
    monkeypatch.setenv("INFERENCE_DEVICE", "cuda")  # no worker up yet, the configured device is a GPU
    later = staff.post(
        "/api/deployments/", {"name": "later", "trained_model": trained_model.pk, "inference_precision": "fp16"}
    )
    assert later.status_code == 201


@pytest.mark.django_db
def test_a_reduced_precision_is_refused_for_a_vlm_with_the_reason(staff, project):
    from training.models import TrainedModel

    vlm = TrainedModel.objects.create(project=project, kind="vlm", name="trend", checkpoint_path="x", config={})
    refused = staff.post(
        "/api/deployments/", {"name": "trend", "trained_model": vlm.pk, "inference_precision": "bf16"}, format="json"
    )
    assert refused.status_code == 400 and "applies to ResNet models" in refused.json()["detail"]
    assert staff.post("/api/deployments/", {"name": "trend", "trained_model": vlm.pk}).status_code == 201


@pytest.mark.django_db
def test_the_deploy_form_offers_the_precision_for_a_resnet_only(user_client, project):
    from training.models import TrainedModel

    resnet = make_trained_model(project, seed=2)
    form = user_client.get(f"/models/{resnet.pk}/deploy").context["form"]
    assert [v for v, _ in form.fields["inference_precision"].choices] == ["fp32", "bf16", "fp16"]
    assert form.initial["inference_precision"] == "fp32"
    vlm = TrainedModel.objects.create(project=project, kind="vlm", name="trend", checkpoint_path="x", config={})
    page = user_client.get(f"/models/{vlm.pk}/deploy")
    assert "inference_precision" not in page.context["form"].fields
    assert 'name="inference_precision"' not in page.content.decode()


def _wait_for_status(deployment, status: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deployment.refresh_from_db()
        if deployment.status == status:
            return deployment
        time.sleep(0.2)
    raise AssertionError(f"{deployment.name} stayed {deployment.status}: {deployment.error}")


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_cpu_worker_serves_bf16_close_to_fp32_and_reports_fp16_as_unhealthy_with_the_reason(
    project, live_server_url, inference_worker_process
):
    from projects.services import agent_create

    token = agent_create(name="rl-precision", kind="rl_worker", all_projects=True)[1]
    model = make_trained_model(project, seed=4)
    images = random_images(8, seed=3)
    half = deploy(model, inference_precision="bf16")
    served = RewardClient(live_server_url, token, half.name).compute_rewards(images).probabilities
    exact = direct_probabilities(model.checkpoint_path, images)
    assert np.abs(np.asarray(served) - exact).max() < 0.05
    assert not np.allclose(served, exact, atol=1e-7)  # really served in bf16, not fp32

    fp16 = deploy(model)  # then stored in fp16 as a row saved before fp16 was refused on a CPU-only host
    Deployment.objects.filter(pk=fp16.pk).update(inference_precision="fp16")
    with pytest.raises(Exception, match="fp16 on the CPU"):
        RewardClient(live_server_url, token, fp16.name, retries=0).compute_rewards(images)
    fp16 = _wait_for_status(fp16, "unhealthy")
    assert "deploy with bf16 or fp32 for a CPU worker" in fp16.error


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_worker_scores_packed_jpeg_and_png_frames_as_it_scores_their_pixels(project, inference_worker_process):
    """Compressed frames travel packed (training.resnet.wire) through Redis to the real worker, which decodes them on
    its device (the CPU here) and answers with the probabilities of the frames decoded first."""
    from django.conf import settings

    from inference.broker import dump_npy
    from training.resnet.wire import EncodedImage, images_pack

    from .conftest import broker_submit

    model = make_trained_model(project, seed=6)
    deployment = deploy(model)
    frames = random_images(4, seed=8)
    encoded = []
    for i, frame in enumerate(frames):
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="PNG" if i % 2 else "JPEG", quality=95)
        encoded.append(EncodedImage(buffer.getvalue(), frame.shape[0], frame.shape[1]))
    pixels = np.stack([np.asarray(Image.open(io.BytesIO(e.data)).convert("RGB")) for e in encoded])
    packed, plain = broker_submit(
        settings.REDIS_URL,
        (deployment.name, deployment.version, dump_npy(images_pack(encoded)), {"timeout": 60}),
        (deployment.name, deployment.version, dump_npy(pixels), {"timeout": 60}),
    )
    np.testing.assert_allclose(packed.unwrap(), plain.unwrap(), atol=2e-3)
    np.testing.assert_allclose(plain.unwrap(), direct_probabilities(model.checkpoint_path, pixels), atol=1e-5)
