"""Done-when of issue 36: an inference worker on a machine with an empty cache serves a deployment's first
request (its model fetched from the object store) within the service's timeout; a second worker on the same
machine reuses the cache (the model is gone from the bucket by then, so it can only come from there)."""

from __future__ import annotations

import sys
import time

import pytest
from django.core.files.storage import default_storage

from common.filestore import store
from common.filestore.cache import FileCache
from common.filestore.publish import folder_publish
from inference.broker import WORKERS_KEY, dump_npy
from tests.conftest import _spawn, _stop, free_port
from tests.inference.conftest import TINY_SIZE, broker_submit, deploy, make_trained_model, random_images

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
TIMEOUT_S = 30.0  # a reward request's own timeout (the broker's default)


def _published_checkpoint(tmp_path) -> str:
    from training.resnet.checkpoint import save_checkpoint
    from training.resnet.config import ResNetConfig
    from training.resnet.model import RewardResNet

    config = ResNetConfig(image_size=[3, TINY_SIZE, TINY_SIZE], hidden_dim=16, dropout=0.0)
    folder = tmp_path / "trainer" / "best"
    save_checkpoint(RewardResNet(config).eval(), config, folder, metrics={}, step=1)
    name = "checkpoints/job_cache_test/best"
    folder_publish(default_storage, folder, name)
    return name


def _serve_once(process_env, env: dict, name: str, redis_url: str, deployment) -> tuple[float, object]:
    """Start a worker, wait until it beats, send one request; (seconds to the answer, the reply)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    before = set(client.hkeys(WORKERS_KEY))
    args = [sys.executable, "manage.py", "inference_worker", "--threads", "1", "--metrics-port", str(free_port())]
    proc = _spawn(args, {**process_env, **env}, f"inference-worker-cache-{name}.log")
    try:
        deadline = time.monotonic() + 120
        while not (set(client.hkeys(WORKERS_KEY)) - before):
            assert proc.poll() is None, f"worker {name} stopped (see its log)"
            assert time.monotonic() < deadline, f"worker {name} never started"
            time.sleep(0.1)
        started = time.monotonic()
        payload = dump_npy(random_images(4, TINY_SIZE))
        (reply,) = broker_submit(redis_url, (deployment.name, deployment.version, payload, {"timeout": TIMEOUT_S}))
        return time.monotonic() - started, reply
    finally:
        _stop(proc)


def test_an_empty_cache_serves_the_first_request_and_a_second_worker_reuses_it(
    project, process_env, s3_storage, own_redis, tmp_path
):
    checkpoint = _published_checkpoint(tmp_path)
    deployment = deploy(make_trained_model(project, checkpoint_path=checkpoint), max_batch_size=8)
    machine = tmp_path / "gpu-node"
    env = {**s3_storage, "RS_DATA_DIR": str(machine), "STORAGE_CACHE_DIR": str(machine / "cache")}
    env["MEDIA_ROOT"] = str(machine / "media")  # empty: nothing of the web's disk
    env |= {"REDIS_URL": own_redis, "CELERY_BROKER_URL": own_redis, "CELERY_RESULT_BACKEND": own_redis}

    took, reply = _serve_once(process_env, env, "first", own_redis, deployment)
    assert reply.error == "" and len(reply.results) == 4, reply
    assert took < TIMEOUT_S
    cache = FileCache(machine / "cache", max_bytes=1 << 40)
    assert [e.name for e in cache.entries()] == [checkpoint]

    store.delete_prefix(default_storage, checkpoint + "/")  # from now on, only this machine's cache has it
    took_again, again = _serve_once(process_env, env, "second", own_redis, deployment)
    assert again.error == "" and again.results == reply.results, again
    assert took_again < TIMEOUT_S
    assert [e.name for e in cache.entries()] == [checkpoint]
    assert not (machine / "media").exists()
