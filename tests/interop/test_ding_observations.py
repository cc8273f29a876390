"""DI-engine 0.5.3's `serial_pipeline_reward_model_offpolicy` with observations as DI-engine's envs give them:
Atari-style stacks of grayscale frames (tests/interop/ding_env.py's `reach_stack`, float32 [4,32,32]) are
scored by their newest frame replicated to 3 channels, and DI-engine's own CartPole config (dizoo's
`cartpole_dqn_config`, [4] float observations) is refused before the learner trains, naming the shape."""

from __future__ import annotations

import numpy as np
import pytest

from tests.inference.conftest import deploy, direct_probabilities, make_trained_model

from .ding_side import app_args, ding_run, pipeline_run, served_count

ITERATIONS = 4


def newest_frame_rgb(stacks: np.ndarray) -> np.ndarray:
    """The documented rendering of float [B,K,H,W] stacks in [0, 1]: the last frame, scaled, on 3 channels."""
    newest = np.clip(np.rint(stacks[:, -1].astype(np.float64) * 255), 0, 255).astype(np.uint8)
    return np.repeat(newest[..., None], 3, axis=-1)


@pytest.fixture
def rl_token(project):
    from projects.services import agent_create

    return agent_create(name="di-engine", kind="rl_worker", scopes=["rewards", "ingest"], projects=[project])[1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inference_worker_process")
def test_dis_pipeline_on_stacked_grayscale_frames_trains_on_the_newest_frames_rewards(
    project, rl_token, live_server_url, tmp_path
):
    from labeling.models import Episode

    trained = make_trained_model(project, seed=3)
    deployment = deploy(trained, reward_type="soft", project=project, sample_every=10**9)  # counts served frames
    before = served_count(deployment)

    adapter = {"uploads": 2, "success_rule": "done_reward>=1"}
    app = app_args(live_server_url, rl_token, deployment, tmp_path)
    result, stacks = pipeline_run(app, exp_name="stack_dqn", env="reach_stack", iterations=ITERATIONS, adapter=adapter)

    assert stacks.shape[1:] == (4, 32, 32) and stacks.dtype == np.float32
    assert result["layout"] == "gray_stack [4, 32, 32], frame -1 of the stack"
    assert len(result["train_batches"]) >= ITERATIONS
    assert served_count(deployment) - before == sum(result["train_batches"])
    rewards = np.concatenate(result["rewards"])
    expected = direct_probabilities(trained.checkpoint_path, newest_frame_rgb(stacks))
    np.testing.assert_allclose(rewards, expected, atol=1e-5)
    assert len(set(np.round(rewards, 6))) > 1

    # every second finished episode uploaded (the first included), as the frames scored; success by the rule
    finished = result["finished_episodes"]
    assert finished >= 2 and len(result["uploaded"]) == (finished + 1) // 2
    episodes = list(Episode.objects.filter(uuid__in=result["uploaded"]))
    assert len(episodes) == len(result["uploaded"]) and all(e.project_id == project.id for e in episodes)
    for episode in episodes:
        steps = list(episode.steps.order_by("index"))
        successes = [s.index for s in steps if s.env_success]
        assert successes in ([], [steps[-1].index]), successes  # only the step that reached the goal
        assert [s.index for s in steps if s.reward == 1.0] == successes  # the env's reward of 1 there
        assert episode.success == bool(successes)
    assert sum(e.success for e in episodes) == result["uploaded_success"]
    assert result["warnings"] == []  # a rule that gives labels: nothing to say

    # DI-engine's tb_logger got the serving figures, one point per estimate call
    scalars = result["scalars"]
    served = scalars["reward_studio/served_frames"]
    assert [value for _, value in served] == list(np.cumsum(result["train_batches"]).astype(float))
    assert [step for step, _ in served] == list(range(1, len(served) + 1))
    np.testing.assert_allclose(
        [value for _, value in scalars["reward_studio/reward_mean"]],
        [np.mean(batch) for batch in result["rewards"]],
        atol=1e-5,
    )
    assert all(value > 0 for _, value in scalars["reward_studio/latency_ms"])
    assert {"reward_studio/probability_mean", "reward_studio/model_version", "reward_studio/uploaded_episodes"} <= set(
        scalars
    )


@pytest.mark.django_db(transaction=True)
def test_dis_own_cartpole_config_is_refused_at_its_first_collect_naming_the_observation(
    project, rl_token, live_server_url, tmp_path
):
    trained = make_trained_model(project, seed=3)
    deployment = deploy(trained, reward_type="soft", project=project)

    result = ding_run("vector", **app_args(live_server_url, rl_token, deployment, tmp_path), exp_name="cartpole")

    assert result["error"] == "ObservationError"
    assert "the observation has shape [4]: a vector (like CartPole's state), not an image" in result["message"]
    assert "point obs_key / image_key" in result["message"]
    assert result["learner_trained"] == 0  # refused before DI-engine's learner took a step
