"""The web-side API other features call: `infer`, awaited or through `async_to_sync`, against a real worker."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from asgiref.sync import async_to_sync
from django.db import connections

from inference.serving import DeploymentNotFound, infer

from .conftest import deploy, direct_probabilities, make_trained_model, random_images

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_infer_returns_the_checkpoint_probabilities_from_async_and_sync_code(project, inference_worker_process):
    model = make_trained_model(project, seed=21)
    deployment = deploy(model)
    images = random_images(3, seed=21)
    expected = direct_probabilities(model.checkpoint_path, images)

    async def many():
        return await asyncio.gather(*(infer(deployment.name, images[i : i + 1]) for i in range(3)))

    # In a thread of its own, as web code calls it (this thread may hold another test's event loop).
    with ThreadPoolExecutor(1) as pool:
        np.testing.assert_allclose(
            pool.submit(async_to_sync(infer), deployment.name, images).result(), expected, atol=1e-5
        )
        got = pool.submit(asyncio.run, many()).result()
        np.testing.assert_allclose([g[0] for g in got], expected, atol=1e-5)
        with pytest.raises(DeploymentNotFound):
            pool.submit(async_to_sync(infer), "missing-deployment", images).result()
        pool.submit(connections.close_all).result()


def test_a_name_or_alias_added_by_another_process_is_found_at_once(project):
    from inference.models import Deployment
    from inference.serving import deployment_name_for

    deployment = deploy(make_trained_model(project, seed=3))
    assert deployment_name_for(deployment.name.upper()) == deployment.name  # the name table is cached now
    with pytest.raises(DeploymentNotFound):
        deployment_name_for("Qwen3-VL-4B-Instruct")
    # another web process adds an alias (no cache of this process is told): the next request finds it
    Deployment.objects.filter(pk=deployment.pk).update(aliases=["Qwen3-VL-4B-Instruct"])
    assert deployment_name_for("qwen3-vl-4b-instruct") == deployment.name


def test_a_deployment_missing_a_moment_ago_is_served_once_it_exists(project):
    from inference.models import Deployment
    from inference.serving import deployment_config

    deployment = deploy(make_trained_model(project, seed=4))
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(DeploymentNotFound):
            pool.submit(async_to_sync(deployment_config), "renamed-elsewhere").result()
        Deployment.objects.filter(pk=deployment.pk).update(name="renamed-elsewhere")  # as another process would
        assert pool.submit(async_to_sync(deployment_config), "renamed-elsewhere").result().id == deployment.pk
        pool.submit(connections.close_all).result()
