"""The RLinf adapters (reward_client/rlinf.py, rlinf_plugin.py) against the running app: an ASGI server and an
inference worker that serves.

RLinf 0.3.0's contract: rlinf/models/embodiment/reward/base_reward_model.py (`compute_reward(observations) ->
[B]`), resnet_reward_model.py `compute_reward` (`main_images`; probabilities zeroed at or below
`reward_threshold`). The plugin inside RLinf's own registry, hook and reward worker:
tests/interop/test_rlinf_plugin.py; here only how `register()` chooses between the service and a local class.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.inference.conftest import deploy, direct_probabilities, make_trained_model, random_images


@pytest.fixture
def rl_token(project):
    from projects.services import agent_create

    return agent_create(name="rl-rlinf", kind="rl_worker", scopes=["rewards"], projects=[project])[1]


class LocalResNet:
    """Stands in for RLinf's own class in a registry dict (RLinf's real registry and worker:
    tests/interop/test_rlinf_plugin.py)."""

    def __init__(self, cfg):
        self.cfg = cfg


def test_register_asks_the_service_only_for_configs_with_a_reward_studio_block():
    from reward_client.rlinf_plugin import RLinfHistoryVLMRewardModel, RLinfResNetRewardModel, register

    registry: dict = {"resnet": LocalResNet, "vlm": LocalResNet}
    entries = register(registry=registry)
    assert set(entries) == {"resnet", "history_vlm"} and registry["vlm"] is LocalResNet
    studio = {"url": "http://127.0.0.1:9", "deployment": "pick-cube"}  # no token: nothing is asked at start
    assert isinstance(registry["resnet"]({"model_type": "resnet"}), LocalResNet)  # local files: RLinf's class
    remote = registry["resnet"]({"model_type": "resnet", "reward_studio": studio})
    assert isinstance(remote, RLinfResNetRewardModel) and remote.to(0).eval() is remote and remote.device == 0
    history = {"history_window": {"history_size": 5, "history_keys": ["main_images"]}}
    vlm = registry["history_vlm"]({"history_buffers": history, "interval_reward": 0.5, "reward_studio": studio})
    assert isinstance(vlm, RLinfHistoryVLMRewardModel) and vlm.interval_reward == 0.5
    with pytest.raises(ValueError, match="'history_vlm' has no RLinf class: give reward.model a reward_studio"):
        registry["history_vlm"]({"history_buffers": history})

    assert register(registry=registry) == entries  # RLINF_EXT_MODULE's register() runs in every worker: no change
    assert registry["resnet"].local_class is LocalResNet
    register("resnet_reward", registry)  # a type RLinf lacks (the seed configs' name): the service only
    assert isinstance(registry["resnet_reward"]({"reward_studio": studio}), RLinfResNetRewardModel)
    with pytest.raises(ValueError, match="give reward.model a reward_studio block"):
        registry["resnet_reward"]({"model_type": "resnet_reward"})
    with pytest.raises(ValueError, match="kind must be one of"):
        register("mine", registry, kind="vlm")


def test_history_vlm_plugin_says_what_its_config_lacks():
    from reward_client.rlinf_plugin import RLinfHistoryVLMRewardModel

    studio = {"url": "http://127.0.0.1:9", "deployment": "vlm"}
    with pytest.raises(ValueError, match="needs reward.model.history_buffers"):
        RLinfHistoryVLMRewardModel({"reward_studio": studio})
    model = RLinfHistoryVLMRewardModel({"history_buffers": {"w": {}}, "reward_studio": studio})
    with pytest.raises(ValueError, match="set reward.reward_mode to history_buffer"):
        model.compute_reward({"main_images": np.zeros((2, 8, 8, 3), np.uint8)})


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


def test_history_variant_gives_interval_reward_when_no_env_is_due():
    """With input_interval above 1 RLinf's env worker sends an empty `history_input` on most steps; no window
    is scored (no request is made) and every env gets interval_reward, plus the success bonus."""
    from reward_client import RLinfHistoryRewardModel

    cfg = {
        "model": {"model_type": "buffered_vlm", "interval_reward": 0.25, "gt_success_bonus": 2.0},
        "reward_studio": {"url": "http://127.0.0.1:9", "deployment": "vlm"},  # nothing listens there
    }
    observations = {
        "history_input": {},
        "main_images": np.zeros((3, 8, 8, 3), np.uint8),
        "env_infos": {"success": np.array([False, True, False])},
    }
    rewards = RLinfHistoryRewardModel(cfg).compute_reward(observations)
    np.testing.assert_allclose(rewards, [0.25, 2.25, 0.25])
