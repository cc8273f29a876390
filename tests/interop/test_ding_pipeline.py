"""DI-engine 0.5.3's own `serial_pipeline_reward_model_offpolicy` (ding/entry/serial_entry_reward_model_offpolicy.py)
runs a tiny DQN on an image env (tests/interop/ding_env.py) with `reward_client.di_engine`'s adapter as its
reward model (DI-engine's registry, `import_names`), against the running app; the rewards it trains on are the
service's answers for each transition's next_obs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.inference.conftest import (
    deploy,
    direct_probabilities,
    make_trained_model,
)

from .ding_side import app_args, ding_run, pipeline_run, served_count, served_uint8

ITERATIONS = 3
ENV_REWARD = -1.0  # ding_env's reward for every step


@pytest.fixture
def rl_token(project):
    from projects.services import agent_create

    return agent_create(name="di-engine", kind="rl_worker", scopes=["rewards", "ingest"], projects=[project])[1]


def test_compile_config_accepts_the_adapters_default_config():
    from reward_client.di_engine import DIEngineRewardModel

    result = ding_run("compile_default", exp_name="compile")
    assert result["class"] == "reward_client.di_engine.DIEngineRewardModel"
    compiled = result["reward_model"]
    for key, value in DIEngineRewardModel.default_config().items():
        assert compiled[key] == value, key
    assert compiled["type"] == "reward_studio"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inference_worker_process")
def test_dis_serial_reward_model_pipeline_trains_on_the_services_rewards(project, rl_token, live_server_url, tmp_path):
    from labeling.models import Episode

    trained = make_trained_model(project, seed=3)
    deployment = deploy(trained, reward_type="soft", project=project, sample_every=10**9)  # counts served frames
    before = served_count(deployment)

    app = app_args(live_server_url, rl_token, deployment, tmp_path)
    result, next_obs = pipeline_run(app, exp_name="reach_dqn", iterations=ITERATIONS, adapter={"uploads": "all"})

    assert result["reward_model_class"] == "reward_client.di_engine.DIEngineRewardModel"
    assert len(result["collects"]) >= ITERATIONS and all(n > 0 for n in result["collects"])
    assert len(result["train_batches"]) >= ITERATIONS
    # every transition the learner trained on was scored by the service, once per sampling, nothing else
    assert served_count(deployment) - before == sum(result["train_batches"])
    rewards = np.concatenate(result["rewards"])
    expected = direct_probabilities(trained.checkpoint_path, served_uint8(next_obs))
    np.testing.assert_allclose(rewards, expected, atol=1e-5)
    assert not np.any(rewards == ENV_REWARD) and len(set(np.round(rewards, 6))) > 1

    # finished episodes went to the project: the reset frame, then every next_obs
    episodes = Episode.objects.filter(uuid__in=result["uploaded"])
    assert result["uploaded"] and episodes.count() == len(result["uploaded"])
    lengths = sorted(e.steps.count() for e in episodes)
    assert all(e.project_id == project.id for e in episodes) and all(2 <= n <= 7 for n in lengths), lengths
    # DI-engine's calls to save(path=exp_name, name=...) at evaluation and at the end
    assert result["saved"] == [
        "reach_dqn/reward_model/ckpt/ckpt_best.json",
        "reach_dqn/reward_model/ckpt/ckpt_last.json",
    ]
    assert result["saved_last"]["deployment"] == deployment.name
    assert result["saved_last"]["trained_model"] == trained.pk
