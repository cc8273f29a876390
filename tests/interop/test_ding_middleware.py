"""DI-engine 0.5.3's `reward_estimator` middleware (ding/framework/middleware/functional/enhancer.py) ignores
what `estimate` returns: with `reward_client.di_engine`'s adapter, ctx.train_data's own transitions get the
service's rewards for their next_obs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.inference.conftest import (
    deploy,
    direct_probabilities,
    make_trained_model,
)

from .ding_side import ding_run, served_uint8


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inference_worker_process")
def test_reward_estimator_middleware_sets_the_services_rewards_in_ctx_train_data(project, live_server_url, tmp_path):
    from projects.services import agent_create

    token = agent_create(name="di-engine", kind="rl_worker", scopes=["rewards"], projects=[project])[1]
    trained = make_trained_model(project, seed=4)
    deployment = deploy(trained, reward_type="soft", project=project)
    frames_path = tmp_path / "next_obs.npy"

    result = ding_run(
        "middleware", url=live_server_url, token=token, deployment=deployment.name, n=7, frames_path=str(frames_path)
    )

    assert result["same_list"] and result["same_items"]
    assert result["reward_types"] == ["Tensor"]
    expected = direct_probabilities(trained.checkpoint_path, served_uint8(np.load(frames_path)))
    np.testing.assert_allclose(result["rewards"], expected, atol=1e-5)
    assert result["env_rewards"] == [-1.0] * 7
