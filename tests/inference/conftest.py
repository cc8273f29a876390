"""Fixtures for inference tests: tiny ResNet checkpoints in storage, trained models, deployments, and a
real inference worker process on Redis."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

TINY_SIZE = 32


def make_tiny_checkpoint(*, seed: int = 0, bias: float = 0.0, size: int = TINY_SIZE) -> str:
    """A tiny RLinf ResNet checkpoint saved with the trainer's save_checkpoint; its storage-relative folder.

    `bias` shifts the final logit, so two checkpoints can give clearly different probabilities."""
    import torch
    from django.core.files.storage import default_storage

    from training.resnet.checkpoint import save_checkpoint
    from training.resnet.config import ResNetConfig
    from training.resnet.model import RewardResNet

    torch.manual_seed(seed)
    config = ResNetConfig(image_size=[3, size, size], hidden_dim=16, dropout=0.0)
    model = RewardResNet(config).eval()
    with torch.no_grad():
        model.backbone.fc[-1].bias.fill_(bias)
    name = f"checkpoints/test_{uuid.uuid4().hex[:10]}"
    save_checkpoint(model, config, default_storage.path(name), metrics={}, step=1)
    return name


def make_trained_model(project, *, seed: int = 0, bias: float = 0.0, checkpoint_path: str | None = None):
    from training.models import TrainedModel

    return TrainedModel.objects.create(
        project=project,
        kind="resnet",
        name=f"tiny-{seed}-{bias}",
        checkpoint_path=checkpoint_path or make_tiny_checkpoint(seed=seed, bias=bias),
        config={},
    )


def deploy(trained_model, **settings):
    """A deployment of the model; `binary` rewards unless a test says otherwise (the tests here were written
    against success_reward/fail_reward; the deployments' own default, `soft`, is tested in test_api.py)."""
    from inference.services import deployment_create

    settings.setdefault("reward_type", "binary")
    return deployment_create(name=f"test-{uuid.uuid4().hex[:8]}", trained_model=trained_model, **settings)


def direct_probabilities(checkpoint_path: str, images: np.ndarray) -> np.ndarray:
    from django.core.files.storage import default_storage

    from training.resnet.checkpoint import load_checkpoint, predict_proba

    model, _ = load_checkpoint(default_storage.path(checkpoint_path), "cpu")
    return predict_proba(model, images)


def random_images(n: int, size: int = TINY_SIZE, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)


@pytest.fixture
def trained_model(project):
    return make_trained_model(project)


@pytest.fixture
def clear_rate_limits():
    """No rate-limit counts left from earlier tests (they live in Redis, keyed by agent and address)."""
    import redis
    from django.conf import settings

    from projects.gate.limits import KEY_PREFIX

    client = redis.Redis.from_url(settings.REDIS_URL)

    def clear():
        keys = list(client.scan_iter(match=KEY_PREFIX + "*", count=1000))
        if keys:
            client.delete(*keys)

    clear()
    yield
    clear()
    client.close()


def broker_submit(url: str, *calls: tuple[str, int, bytes, dict]) -> list:
    """Replies to (deployment, version, payload, submit options) requests, sent at once through the web
    side's (async) broker client from sync test code; a failed submit raises."""
    import asyncio

    from common.redis_clients import redis_from_url
    from inference.broker import AsyncBrokerClient

    async def run() -> list:
        client = AsyncBrokerClient(redis_from_url(url, asyncio=True))
        try:
            return list(await asyncio.gather(*(client.submit(d, v, p, **o) for d, v, p, o in calls)))
        finally:
            await client.redis.aclose()

    return asyncio.run(run())
