"""Fixtures: a real object store (SeaweedFS) and the S3 settings pointed at a fresh bucket."""

from __future__ import annotations

import pytest
import redis

from tests.conftest import own_redis_url
from tests.object_store import (
    bucket_delete,
    buckets_left_delete,
    ensure_object_store,
    fresh_bucket,
    s3_env,
    s3_storage_config,
)


@pytest.fixture(scope="session")
def object_store() -> str:
    """The endpoint of a running SeaweedFS S3 gateway (scripts/test.sh's, or one started now)."""
    endpoint = ensure_object_store()
    buckets_left_delete(endpoint)
    return endpoint


@pytest.fixture
def s3_storage(object_store, settings, tmp_path):
    """This test's default storage: a fresh private bucket; this process's cache under tmp_path."""

    env = s3_env(object_store, fresh_bucket(object_store))
    settings.STORAGE_CACHE_DIR = tmp_path / "cache"
    settings.STORAGE_CACHE_MAX_MB = 64
    settings.STORAGES = {
        **settings.STORAGES,
        "default": s3_storage_config(env),
    }
    yield env
    bucket_delete(object_store, env["S3_BUCKET"])


@pytest.fixture
def own_redis(settings) -> str:
    """A Redis database of this test's own for the processes it starts (REDIS_URL, the Celery broker and
    results): the session's workers on REDIS_URL, running with the web's disk, would otherwise take this test's
    tasks and requests (they did, in the full suite: "model failed to load: ... /tmp/rs-test-media-...")."""
    url = own_redis_url(settings.REDIS_URL)
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
