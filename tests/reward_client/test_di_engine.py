"""The DI-engine adapter (reward_client/di_engine.py, retrain.py) against the running app: an ASGI server, a
Celery worker that trains, and an inference worker that serves.

di-engine 0.5.3's contract: ding/reward_model/base_reward_model.py (`estimate`, `train`, `collect_data`,
`clear_data`, `load_expert_data`, `save(path, name)`; built as `cls(config, device, tb_logger)`),
ding/entry/serial_entry_reward_model_offpolicy.py (train() and clear_data() every iteration, the value
estimate returns used) and ding/framework/middleware/functional/enhancer.py (`estimate` in place).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.inference.conftest import deploy, direct_probabilities, make_trained_model

TINY = {"hidden_dim": 16, "image_size": [3, 32, 32], "epochs": 4, "batch_size": 16, "warmup_steps": 0, "num_threads": 1}


@pytest.fixture
def rl_token(project):
    """A token on the project with what the adapter needs: rewards, and for the retrain loop also uploading
    episodes, generating proposals (labels) and training (snapshot, job, switching the deployment's model)."""
    from projects.services import agent_create

    scopes = ["rewards", "ingest", "labels", "training"]
    return agent_create(name="rl-adapters", kind="rl_worker", scopes=scopes, projects=[project])[1]


def scene(success: bool, rng) -> np.ndarray:
    """Dark noise, with a bright square once the task succeeded."""
    frame = rng.integers(0, 60, (32, 32, 3), dtype=np.uint8)
    if success:
        frame[8:24, 8:24] = (230, 40, 40)
    return frame


def transitions(episodes: int, steps: int, seed: int) -> list[dict]:
    """Interleaved envs (`env_id`), success from the middle of each episode on; each transition's obs is
    its env's previous next_obs (one trajectory per env)."""
    rng = np.random.default_rng(seed)
    last = {env: scene(False, rng) for env in range(episodes)}
    out = []
    for t in range(steps):
        for env in range(episodes):
            success = t >= steps // 2
            obs, last[env] = last[env], scene(success, rng)
            out.append(
                {
                    "env_id": env,
                    "obs": obs,
                    "next_obs": last[env],
                    "action": np.zeros(2, np.float32),
                    "reward": np.array([float(success)], np.float32),
                    "done": t == steps - 1,
                    "info": {"success": success},
                }
            )
    return out


def adapter(config: dict, live_server_url: str, rl_token: str, deployment) -> object:
    from reward_client import DIEngineRewardModel

    base = {"url": live_server_url, "token": rl_token, "deployment": deployment.name, "poll_s": 0.5}
    return DIEngineRewardModel({**base, **config}, "cpu", None)  # DI-engine's registry signature


@pytest.mark.django_db(transaction=True)
def test_estimate_scores_next_obs_in_place_and_never_adds_the_env_reward_twice(
    project, rl_token, live_server_url, inference_worker_process
):
    trained = make_trained_model(project, seed=2)
    deployment = deploy(trained, reward_type="soft")
    model = adapter({"env_reward": "local", "estimate_batch": 3}, live_server_url, rl_token, deployment)
    batch = transitions(episodes=2, steps=4, seed=3)  # 8 transitions: three requests of at most 3
    p = direct_probabilities(trained.checkpoint_path, np.stack([t["next_obs"] for t in batch]))
    env = np.array([t["reward"][0] for t in batch])
    items = list(batch)

    assert model.estimate(batch) is batch  # the serial pipeline uses the answer, the middleware the batch
    assert all(a is b for a, b in zip(batch, items, strict=True))
    np.testing.assert_allclose([t["reward"][0] for t in batch], p + env, atol=1e-5)
    model.estimate(batch)  # sampled again from the replay buffer
    np.testing.assert_allclose([t["reward"][0] for t in batch], p + env, atol=1e-5)
    np.testing.assert_allclose([t["env_reward"][0] for t in batch], env)


@pytest.mark.django_db(transaction=True)
def test_a_token_lacking_a_scope_the_settings_need_is_refused_at_construction(project, live_server_url):
    from projects.services import agent_create

    deployment = deploy(make_trained_model(project, seed=2))
    rewards_only = agent_create(name="rewards-only", kind="rl_worker", scopes=["rewards"], projects=[project])[1]
    ingest_only = agent_create(name="ingest-only", kind="sim", scopes=["ingest"], projects=[project])[1]

    needed = r"ingest \(this token lacks the 'ingest' scope needed to ingest episodes\), needed by uploads='all'"
    with pytest.raises(PermissionError, match=needed):
        adapter({"uploads": "all"}, live_server_url, rewards_only, deployment)
    with pytest.raises(
        PermissionError, match=r"train \(this token lacks the 'training' scope.*retrain_after_transitions"
    ):
        adapter({"retrain_after_transitions": 100}, live_server_url, rewards_only, deployment)
    with pytest.raises(
        PermissionError, match=r"rewards \(this token lacks the 'rewards' scope needed to ask for rewards"
    ):
        adapter({"uploads": "all"}, live_server_url, ingest_only, deployment)
    model = adapter({}, live_server_url, rewards_only, deployment)  # uploads off, no retrain: rewards suffice
    assert model.cfg["project"] == project.pk


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_retrain_runs_while_train_returns_and_the_better_model_is_served(
    project, rl_token, live_server_url, celery_worker_process, inference_worker_process, tmp_path
):
    from inference.models import Deployment
    from labeling.models import Episode

    first = make_trained_model(project, seed=1, bias=-30.0)  # says fail to everything
    deployment = deploy(first, reward_type="soft")
    config = {
        "env_reward": "ignore",
        "uploads": "all",
        "success_rule": "info",
        "job_config": TINY,
        "snapshot_options": {"sources": ["proposal"], "trend": False, "val_split": 0.34, "seed": 0},
        "retrain_after_transitions": 40,
        "train_timeout_s": 300,
    }
    model = adapter(config, live_server_url, rl_token, deployment)

    model.collect_data(transitions(episodes=4, steps=8, seed=0))
    expert = transitions(episodes=2, steps=8, seed=1)
    model.load_expert_data([[t for t in expert if t["env_id"] == env] for env in (0, 1)])
    assert len(model.uploaded) == 6 and len(model.train_data) == 32
    episodes = Episode.objects.filter(uuid__in=model.uploaded)
    assert sorted(e.steps.count() for e in episodes) == [9] * 6  # the reset frame, then every next_obs
    assert sum(bool((e.metadata or {}).get("expert")) for e in episodes) == 2
    assert model.train() == {"phase": "idle", "new_transitions": 32, "last": {}}  # not enough new data yet

    model.clear_data(iter=3)
    model.collect_data(transitions(episodes=1, steps=8, seed=2)[:7])  # an episode still under way
    model.clear_data()
    model.collect_data(transitions(episodes=1, steps=8, seed=2)[7:])  # its done: uploaded whole
    assert len(model.uploaded) == 7 and model.train_data and len(model.train_data) == 1
    assert Episode.objects.get(uuid=model.uploaded[-1]).steps.count() == 9

    version = deployment.version
    status = model.train()  # 40 new transitions: the retrain starts, and train() is back at once
    assert status["phase"] in ("proposals", "snapshot", "job") and model.retrain is not None
    assert Deployment.objects.get(pk=deployment.pk).trained_model_id == first.pk
    result = model.retrain_wait(timeout_s=300)
    assert result["phase"] == "done", result
    deployment = Deployment.objects.select_related("trained_model").get(pk=deployment.pk)
    assert result["new_accuracy"] > result["old_accuracy"] and result["redeployed"]
    assert deployment.trained_model_id == result["model"] != first.pk and deployment.version > version

    probe = [
        {"next_obs": scene(i % 2 == 0, np.random.default_rng(9 + i)), "reward": np.array([5.0], np.float32)}
        for i in range(4)
    ]
    model.estimate(probe)
    expected = direct_probabilities(deployment.trained_model.checkpoint_path, np.stack([p["next_obs"] for p in probe]))
    np.testing.assert_allclose([p["reward"][0] for p in probe], expected, atol=1e-5)  # env reward ignored

    saved = model.save(str(tmp_path), "best")  # DI-engine's call at evaluation
    assert saved == str(tmp_path / "reward_model" / "ckpt" / "ckpt_best.json")
    Deployment.objects.filter(pk=deployment.pk).update(trained_model=first)
    state = model.load(str(tmp_path), "best", restore=True)
    assert state["trained_model"] == result["model"] and state["last_train"] == result
    assert Deployment.objects.get(pk=deployment.pk).trained_model_id == result["model"]


class ScriptedService:
    """Answers the retrain's calls from a script and records them (no server: the steps' order only)."""

    deployment = "d"

    def __init__(
        self,
        snapshots=("building", "ready"),
        generations=("queued", "running", "succeeded"),
        jobs=("running", "succeeded"),
        accuracies=(0.5, 0.75),
    ):
        self.snapshots, self.generations, self.jobs = list(snapshots), list(generations), list(jobs)
        self.accuracies = dict(zip((5, 4), accuracies, strict=True))  # new model 5, served model 4
        self.calls: list[tuple[str, str]] = []

    def call(self, method: str, url: str, **kwargs):
        self.calls.append((method, url))
        if url.endswith("/proposals/generate") or url == "/api/proposal-jobs/2":
            return {"id": 2, "status": self.generations.pop(0), "url": "/api/proposal-jobs/2", "error": "stopped"}
        if url.endswith("/snapshots") or url == "/api/snapshots/7":
            return {
                "id": 7,
                "number": 3,
                "status": self.snapshots.pop(0),
                "url": "/api/snapshots/7",
                "error": "no labels",
            }
        if url.endswith("/jobs") or url == "/api/jobs/11":
            return {"id": 11, "status": self.jobs.pop(0), "models": [5], "error": "boom"}
        if url == "/api/deployments/d/":
            return {"trained_model": 4, "threshold": 0.5, "version": 1, "project": 1}
        if url == "/api/deployments/d/access":
            return {
                "project": 1,
                "allowed": dict.fromkeys(("rewards", "propose_labels", "train", "switch_model"), True),
            }
        if url.endswith("/evaluation"):
            assert kwargs["params"] == {"snapshot": 7, "threshold": 0.5}
            return {"summary": {"at_threshold": {"accuracy": self.accuracies[int(url.split("/")[3])]}}}
        if url.endswith("/model"):
            return {"version": 2}
        raise AssertionError(url)


def scripted(service: ScriptedService, tb_logger=None, **config):
    from reward_client import DIEngineRewardModel

    model = DIEngineRewardModel(
        {"project": 1, "poll_s": 0.0, "train_timeout_s": 5, "retrain_after_transitions": 2, **config},
        "cpu",
        tb_logger,
        client=service,
    )
    model.new_transitions = 2
    return model


def test_train_advances_the_retrain_one_look_per_call_and_switches_only_to_a_better_model():
    service = ScriptedService()
    model = scripted(service)
    phases = [model.train()["phase"]]
    while model.retrain is not None:
        phases.append(model.train()["phase"])
    assert phases == ["proposals", "proposals", "snapshot", "job", "idle"]
    urls = [url for _, url in service.calls]
    assert urls.index("/api/projects/1/snapshots") > urls.index("/api/proposal-jobs/2")  # proposals done first
    assert urls.index("/api/projects/1/jobs") > urls.index("/api/snapshots/7")  # and the snapshot built
    assert model.last_train == {
        "phase": "done",
        "labels": {"episodes": 0, "success_episodes": 0, "success_rule": "auto"},
        "snapshot": 3,
        "job": 11,
        "model": 5,
        "old_model": 4,
        "old_accuracy": 0.75,
        "new_accuracy": 0.5,
        "redeployed": False,
        "reason": "not more accurate than the served model",
    }
    assert ("POST", "/api/deployments/d/model") not in service.calls

    better = ScriptedService(accuracies=(0.9, 0.6))
    model = scripted(better)
    model.train()
    assert model.retrain_wait(timeout_s=5)["redeployed"] is True
    assert ("POST", "/api/deployments/d/model") in better.calls and model.new_transitions == 0


def test_each_finished_retrain_writes_its_figures_to_tb_logger():
    from .test_di_engine_settings import Recorder

    recorder = Recorder()
    model = scripted(ScriptedService(accuracies=(0.9, 0.6)), recorder)
    model.train()
    model.retrain_wait(timeout_s=5)
    model.client, model.new_transitions = ScriptedService(jobs=("running", "failed")), 2
    model.train()
    assert model.retrain_wait(timeout_s=5)["phase"] == "failed"
    assert recorder.scalars["reward_studio/retrain_new_accuracy"] == [(1, 0.9)]
    assert recorder.scalars["reward_studio/retrain_old_accuracy"] == [(1, 0.6)]
    assert recorder.scalars["reward_studio/retrain_redeployed"] == [(1, 1.0), (2, 0.0)]


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ({"generations": ("running", "cancelled")}, "proposal generation cancelled: stopped"),
        ({"snapshots": ("building", "failed")}, "snapshot #3 failed: no labels"),
        ({"jobs": ("running", "failed")}, "training job 11 failed: boom"),
    ],
)
def test_a_failed_step_ends_the_retrain_and_the_served_model_stays(script, error):
    service = ScriptedService(**script)
    model = scripted(service)
    model.train()
    result = model.retrain_wait(timeout_s=5)
    assert result["phase"] == "failed" and error in result["error"]
    assert ("POST", "/api/deployments/d/model") not in service.calls
    assert model.train()["phase"] == "idle"  # the RL run goes on


def test_the_retrain_gives_up_after_its_timeout():
    model = scripted(ScriptedService(jobs=["running"] * 1000), train_timeout_s=0.05)
    model.train()
    time.sleep(0.1)
    assert "did not finish in time" in model.retrain_wait(timeout_s=5)["error"]


@pytest.mark.django_db(transaction=True)
def test_the_documented_di_engine_example_runs(project, rl_token, live_server_url, inference_worker_process):
    import subprocess
    import sys

    from labeling.models import Episode
    from tests.conftest import ROOT

    deployment = deploy(make_trained_model(project, seed=5), reward_type="soft")
    args = ["--url", live_server_url, "--token", rl_token, "--deployment", deployment.name]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "reward_client.examples.di_engine_reward_model_example",
            *args,
            "--episodes",
            "2",
            "--steps",
            "4",
            "--size",
            "32",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "uploaded 2 episodes" in out.stdout and out.stdout.count("estimated rewards:") == 1
    assert Episode.objects.filter(project=project, metadata__uploaded_by="di-engine").count() == 2
