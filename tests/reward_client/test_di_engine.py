"""The RLinf and DI-engine adapters (reward_client/rlinf.py, di_engine.py) against the running app: an ASGI server, a
Celery worker that trains, and an inference worker that serves.

DI-engine's interface: /work/dieng/ding/reward_model/base_reward_model.py (`estimate`, `train`,
`collect_data`, `clear_data`, `load_expert_data`; built as `cls(config, device, tb_logger)`). RLinf's:
rlinf/models/embodiment/reward/base_reward_model.py:73-89 (`compute_reward(observations) -> [B]`) and
resnet_reward_model.py:267-300 (`main_images`; probabilities zeroed at or below `reward_threshold`).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.inference.conftest import deploy, direct_probabilities, make_trained_model, random_images

TINY = {"hidden_dim": 16, "image_size": [3, 32, 32], "epochs": 1, "batch_size": 16, "warmup_steps": 0, "num_threads": 1}


@pytest.fixture
def rl_token(project):
    """A token on the project with what the adapters need: rewards, and for DI-engine's loop also uploading
    episodes, generating proposals (labels) and training (snapshot, job, switching the deployment's model)."""
    from labeling.services import agent_create

    scopes = ["rewards", "ingest", "labels", "training"]
    return agent_create(name="rl-adapters", kind="rl_worker", scopes=scopes, projects=[project])[1]


def scene(success: bool, rng) -> np.ndarray:
    """Dark noise, with a bright square once the task succeeded."""
    frame = rng.integers(0, 60, (32, 32, 3), dtype=np.uint8)
    if success:
        frame[8:24, 8:24] = (230, 40, 40)
    return frame


def transitions(episodes: int, steps: int, seed: int) -> list[dict]:
    """Interleaved envs (`env_id`), success from the middle of each episode on."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(steps):
        for env in range(episodes):
            success = t >= steps // 2
            out.append(
                {
                    "env_id": env,
                    "obs": scene(success, rng),
                    "action": np.zeros(2, np.float32),
                    "reward": np.array([float(success)], np.float32),
                    "done": t == steps - 1,
                    "info": {"success": success},
                }
            )
    return out


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_di_engine_adapter_collects_trains_and_estimates_with_the_new_model(
    project, rl_token, live_server_url, celery_worker_process, inference_worker_process
):
    from inference.models import Deployment
    from labeling.models import Episode
    from reward_client import DIEngineRewardModel

    first = make_trained_model(project, seed=1)
    deployment = deploy(first, reward_type="soft")
    config = {
        "type": "reward_studio",
        "url": live_server_url,
        "token": rl_token,
        "deployment": deployment.name,
        "env_reward": "ignore",
        "job_config": TINY,
        "snapshot_options": {"sources": ["proposal"], "trend": False, "val_split": 0.34, "seed": 0},
        "poll_s": 0.5,
        "train_timeout_s": 300,
    }
    model = DIEngineRewardModel(config, "cpu", None)  # DI-engine's registry signature

    model.collect_data(transitions(episodes=4, steps=8, seed=0))
    expert = transitions(episodes=2, steps=8, seed=1)
    model.load_expert_data([[t for t in expert if t["env_id"] == env] for env in (0, 1)])
    assert len(model.uploaded) == 6 and len(model.train_data) == 32
    episodes = Episode.objects.filter(uuid__in=model.uploaded)
    assert sorted(e.steps.count() for e in episodes) == [8] * 6
    assert sum(bool((e.metadata or {}).get("expert")) for e in episodes) == 2

    version = deployment.version
    result = model.train()
    deployment = Deployment.objects.select_related("trained_model").get(pk=deployment.pk)
    assert deployment.trained_model_id == result["model"] != first.pk
    assert deployment.version > version

    probe = [
        {"obs": scene(i % 2 == 0, np.random.default_rng(9 + i)), "reward": np.array([5.0], np.float32)}
        for i in range(4)
    ]
    estimated = model.estimate(probe)
    expected = direct_probabilities(deployment.trained_model.checkpoint_path, np.stack([p["obs"] for p in probe]))
    np.testing.assert_allclose([e["reward"][0] for e in estimated], expected, atol=1e-5)  # env reward ignored
    assert probe[0]["reward"][0] == 5.0  # the replay buffer's items are untouched

    model.clear_data()
    assert model.train_data == [] and model.uploaded  # uploads stay in the project


@pytest.mark.django_db(transaction=True)
def test_rlinf_adapter_from_rlinf_reward_config(project, rl_token, live_server_url, inference_worker_process):
    from reward_client import RLinfRewardModel

    trained = make_trained_model(project, seed=3)
    images = random_images(4, seed=2)
    p = direct_probabilities(trained.checkpoint_path, images)
    threshold = float(np.sort(p)[1])  # one probability sits exactly at the threshold: zeroed, like RLinf
    deployment = deploy(trained, reward_type="thresholded", threshold=threshold, env_reward_weight=1.0)
    reward_cfg = {  # RLinf's `reward` section, plus where the service is
        "use_reward_model": True,
        "reward_mode": "per_step",
        "model": {"model_type": "resnet", "reward_threshold": threshold, "image_size": [3, 32, 32]},
        "reward_studio": {"url": live_server_url, "token": rl_token, "deployment": deployment.name},
    }
    rewards = RLinfRewardModel(reward_cfg).compute_reward({"main_images": images, "rewards": np.ones(4)})
    np.testing.assert_allclose(rewards, np.where(p > threshold, p, 0.0), atol=1e-5)  # env reward not added

    with pytest.raises(ValueError, match="reward_threshold=0.9 needs the deployment"):
        RLinfRewardModel({**reward_cfg, "model": {"reward_threshold": 0.9}})


def test_adapters_import_without_django_or_torch():
    code = (
        "import sys; from reward_client import DIEngineRewardModel, RLinfRewardModel, RLinfHistoryRewardModel; "
        "bad = [m for m in ('django', 'torch', 'rest_framework') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={"PATH": "/usr/bin:/bin"})


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_rlinf_history_variant_scores_rlinf_windows_like_its_api_worker(
    project, rl_token, live_server_url, inference_worker_process
):
    """RLinf's API reward worker (rlinf/workers/reward/api_reward_worker.py:222-254): every env starts at
    interval_reward, envs with a non-empty window get the parsed label's reward (reward_parser_params), then
    gt_success_bonus is added for every env whose env_infos say success."""
    import uuid

    from django.core.files.storage import default_storage

    from reward_client import RLinfHistoryRewardModel
    from training.models import TrainedModel
    from training.storage import local_path
    from training.vlm.checkpoint import checkpoint_load
    from training.vlm.fixture import build_tiny_qwen3_vl
    from training.vlm.labels import LABELS
    from training.vlm.scoring import ScoreItem, TrendScorer

    name = f"checkpoints/vlm_{uuid.uuid4().hex[:8]}"
    build_tiny_qwen3_vl(default_storage.path(name))
    vlm = TrainedModel.objects.create(
        project=project, kind="vlm", name="tiny-vlm", checkpoint_path=name, config={"prompt": "Judge the trend."}
    )
    deployment = deploy(vlm)
    parser = {"positive_reward": 3.0, "negative_reward": -2.0, "unclear_reward": 0.5, "invalid_reward": -0.1}
    cfg = {
        "reward_mode": "history_buffer",
        "model": {
            "model_type": "buffered_vlm",
            "interval_reward": 0.25,
            "gt_success_bonus": 10.0,
            "reward_parser_params": parser,
        },
        "reward_studio": {"url": live_server_url, "token": rl_token, "deployment": deployment.name, "generate": False},
    }
    rng = np.random.default_rng(5)
    clip = [[rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(3)] for _ in range(4)]
    observations = {
        "history_input": {
            "history_window": {
                "main_images": [clip[0], [], clip[2]],
                "extra_view_images": [clip[1], [], clip[3]],
            }
        },
        "env_infos": {"success": np.array([False, True, True])},
    }
    rewards = RLinfHistoryRewardModel(cfg).compute_reward(observations)

    model, processor, _ = checkpoint_load(local_path(vlm.checkpoint_path), device="cpu")
    probs = TrendScorer(model, processor).probabilities(
        [ScoreItem([*clip[0], *clip[1]], "Judge the trend."), ScoreItem([*clip[2], *clip[3]], "Judge the trend.")]
    )
    label_reward = {"positive": 3.0, "negative": -2.0, "unclear": 0.5}
    first, third = (label_reward[LABELS[int(np.argmax(p))]] for p in probs)
    np.testing.assert_allclose(rewards, [first, 0.25 + 10.0, third + 10.0], atol=1e-6)


class _ScriptedService:
    """Answers the adapter's calls from a script; records them (no server: the waiting logic only)."""

    deployment = "d"

    def __init__(self, snapshot_states: list[str], generation_states: tuple[str, ...] = ("queued", "running", "done")):
        self.snapshot_states, self.calls = list(snapshot_states), []
        self.generation_states = list(generation_states)

    def call(self, method: str, url: str, **kwargs):
        self.calls.append((method, url))
        if url.endswith("/proposals/generate") or url == "/api/proposal-jobs/2":
            status = self.generation_states.pop(0)
            return {"id": 2, "status": status, "url": "/api/proposal-jobs/2", "error": "stopped"}
        if url.endswith("/snapshots") or url == "/api/snapshots/7":
            status = self.snapshot_states.pop(0)
            return {"id": 7, "number": 3, "status": status, "url": "/api/snapshots/7", "error": "no labels"}
        if url.endswith("/jobs"):
            return {"id": 11, "status": "succeeded", "models": [5]}
        if url.endswith("/model"):
            return {"version": 2}
        return {}


def test_di_engine_train_waits_for_the_snapshot_build_before_queueing_the_job():
    from reward_client import DIEngineRewardModel, RewardServiceError

    def adapter(service):
        model = DIEngineRewardModel({"project": 1, "poll_s": 0.01, "train_timeout_s": 5})
        model.client = service
        return model

    service = _ScriptedService(["building", "building", "ready"])
    assert adapter(service).train() == {"snapshot": 3, "job": 11, "model": 5, "version": 2}
    urls = [url for _, url in service.calls]
    assert urls.count("/api/snapshots/7") == 2 and urls.index("/api/projects/1/jobs") > urls.index("/api/snapshots/7")
    # the snapshot is asked for once the proposal job is done
    assert urls.count("/api/proposal-jobs/2") == 2 and urls.index("/api/projects/1/snapshots") == 3

    cancelled = _ScriptedService(["ready"], generation_states=("running", "cancelled"))
    with pytest.raises(RewardServiceError, match="proposal generation cancelled: stopped"):
        adapter(cancelled).train()
    assert not any(url.endswith("/snapshots") for _, url in cancelled.calls)

    failed = _ScriptedService(["building", "failed"])
    with pytest.raises(RewardServiceError, match="snapshot #3 failed: no labels"):
        adapter(failed).train()
    assert not any(url.endswith("/jobs") for _, url in failed.calls)
