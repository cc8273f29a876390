"""The retrain from inside DI-engine 0.5.3's `serial_pipeline_reward_model_offpolicy`: with uploads on, the
adapter's `train()` (called by the pipeline every iteration) starts a retrain once enough transitions came,
its labels from what DI-engine's transitions carry (`done` and the env reward, by `success_rule`; they carry
no `info`), and the deployment switches to the new model when it is more accurate."""

from __future__ import annotations

import pytest

from tests.inference.conftest import deploy, make_trained_model

from .ding_side import app_args, pipeline_run

TINY = {"hidden_dim": 16, "image_size": [3, 32, 32], "epochs": 4, "batch_size": 16, "warmup_steps": 0, "num_threads": 1}


@pytest.fixture
def rl_token(project):
    from projects.services import agent_create

    scopes = ["rewards", "ingest", "labels", "training"]
    return agent_create(name="di-engine", kind="rl_worker", scopes=scopes, projects=[project])[1]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inference_worker_process", "celery_worker_process")
def test_a_retrain_started_by_dis_pipeline_learns_from_its_transitions_and_the_better_model_is_served(
    project, rl_token, live_server_url, tmp_path
):
    from inference.models import Deployment
    from labeling.models import Episode, Step
    from training.models import DatasetSnapshot

    first = make_trained_model(project, seed=1, bias=30.0)  # says success to every frame
    deployment = deploy(first, reward_type="soft", project=project)
    adapter = {
        "uploads": "all",
        "success_rule": "done_reward>=1",  # the reach env's reward of 1 at the step that reaches the goal
        "retrain_after_transitions": 64,
        "job_config": TINY,
        "snapshot_options": {"sources": ["proposal"], "trend": False, "val_split": 0.34, "seed": 0},
        "train_timeout_s": 300,
        "poll_s": 0.5,
    }

    result, _ = pipeline_run(
        app_args(live_server_url, rl_token, deployment, tmp_path),
        exp_name="retrain_dqn",
        env="reach_stack",
        max_steps=16,  # a random walk reaches the goal in about half the episodes
        iterations=10,
        adapter=adapter,
        retrain_wait_s=300,
    )

    # started inside the pipeline (DI-engine's train() calls), with the episodes uploaded so far as labels
    assert result["retrain_at_end"]["phase"] != "idle" or result["retrain_at_end"]["last"], result["retrain_at_end"]
    retrain = result["retrain"]
    assert retrain["phase"] == "done", retrain
    labels = retrain["labels"]
    assert labels["success_rule"] == "done_reward>=1" and labels["episodes"] > 0
    assert 0 < labels["success_episodes"] <= labels["episodes"]
    assert result["warnings"] == []

    uploaded = Episode.objects.filter(uuid__in=result["uploaded"])
    success_steps = Step.objects.filter(episode__in=uploaded, env_success=True)
    assert success_steps.count() == result["uploaded_success"] > 0
    assert all(step.terminated and step.reward == 1.0 for step in success_steps)
    snapshot = DatasetSnapshot.objects.get(project=project, number=retrain["snapshot"])
    counts = snapshot.stats["train"]
    assert counts.get("success", 0) > 0 and counts.get("fail", 0) > 0, snapshot.stats

    # the new model is more accurate on the new snapshot's validation split: the deployment serves it
    assert retrain["redeployed"] and retrain["new_accuracy"] > retrain["old_accuracy"], retrain
    served = Deployment.objects.get(pk=deployment.pk)
    assert served.trained_model_id == retrain["model"] != first.pk and served.version > deployment.version
