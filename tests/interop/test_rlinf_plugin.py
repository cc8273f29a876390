"""RLinf 0.3.0 builds Reward Studio deployments as its own `resnet` and `history_vlm` reward models: the side
process gets `RLINF_EXT_MODULE=reward_client.rlinf_plugin` in its environment, RLinf's `EmbodiedRewardWorker`
(its per-process set-up) imports it and calls `register()`, its `init_worker` builds the model from an RLinf
YAML through `get_reward_model_class`, and its `compute_image_rewards` answers what RLinf's `EnvWorker`
sends, with the running app's served rewards (tests/interop/side_rlinf_plugin.py says what is left out: Ray
and the GPU). The same YAML without a `reward_studio` block still builds RLinf's own class. And RLinf's own
Ray launch runs the hook in the reward worker's process, which then stops at the GPU line."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.inference.conftest import deploy, direct_probabilities, make_trained_model, random_images

from .conftest import ROOT, side_run

RUNNER = "side_rlinf_plugin.py"
# the variables RLinf's scheduler gives a worker process (Worker.__new__ runs its set-up only with them)
WORKER_ENV = {"CLUSTER_NODE_RANK": "0", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
HOOK = {"RLINF_EXT_MODULE": "reward_client.rlinf_plugin"}
GPU_LINE = 'torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))'
STUDIO = {
    "resnet": "reward_client.rlinf_plugin.StudioResNetRewardModel",
    "history_vlm": "reward_client.rlinf_plugin.StudioHistoryVLMRewardModel",
}
RLINF = {
    "resnet": "rlinf.models.embodiment.reward.resnet_reward_model.ResNetRewardModel",
    "history_vlm": "rlinf.models.embodiment.reward.vlm_reward_model.HistoryVLMRewardModel",
}


def rlinf_yaml(model: str, *, envs: int, reward_mode: str = "per_step") -> str:
    """An RLinf embodied config: the keys its env and reward workers read, `reward.model` as given."""
    return textwrap.dedent(
        """\
        env:
          group_name: EnvGroup
          train:
            total_num_envs: {envs}
        rollout:
          pipeline_stage_num: 1
        runner:
          enable_decoupled_mode: false
        reward:
          use_reward_model: true
          group_name: RewardWorkerGroup
          reward_mode: {reward_mode}
          reward_weight: 1.0
          env_reward_weight: 0.0
          model:
        """
    ).format(envs=envs, reward_mode=reward_mode) + textwrap.indent(textwrap.dedent(model), " " * 4)


def client_only(tmp_path: Path) -> str:
    """A folder holding only `reward_client` (a link to the checkout's), for PYTHONPATH: what
    `pip install ./reward_client` gives, and nothing else of the project."""
    folder = tmp_path / "client"
    folder.mkdir()
    (folder / "reward_client").symlink_to(ROOT / "reward_client")
    return str(folder)


def rlinf_worker(tmp_path: Path, configs: list[str], steps: dict, **args) -> list[dict]:
    np.savez(tmp_path / "steps.npz", **steps)
    env = {**WORKER_ENV, **HOOK, "PYTHONPATH": client_only(tmp_path)}
    result = side_run("worker", 600, runner=RUNNER, env=env, configs=configs, steps=tmp_path / "steps.npz", **args)
    assert result["ext_module"] == "reward_client.rlinf_plugin"
    # RLinf's own registry before and after its worker set-up imported the hook; each later worker of the
    # process runs the hook again, which changes nothing
    assert {k: result["runs"][0]["registry_before"][k] for k in RLINF} == RLINF
    for run in result["runs"]:
        assert {k: run["registry"][k] for k in STUDIO} == STUDIO
        assert run["gpu_stop"]["line"] == GPU_LINE and run["gpu_stop"]["file"].endswith("reward/reward_worker.py")
    return result["runs"]


@pytest.fixture
def rl_token(project):
    from projects.services import agent_create

    return agent_create(name="rlinf-worker", kind="rl_worker", scopes=["rewards"], projects=[project])[1]


def resnet_model(**keys) -> str:
    lines = ["model_type: resnet"] + [f"{key}: {value}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def studio_block(url: str, token: str, deployment: str, **extra) -> str:
    """`reward.model.reward_studio`, the one block the remote route adds to RLinf's config."""
    block = {"url": url, "token": token, "deployment": deployment, **extra}
    return "reward_studio:\n" + "".join(f"  {key}: {json.dumps(value)}\n" for key, value in block.items())


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inference_worker_process")
def test_rlinfs_reward_worker_builds_resnet_from_the_hook_and_serves_the_deployment(
    project, rl_token, live_server_url, tmp_path
):
    from django.core.files.storage import default_storage

    from training.resnet.checkpoint import WEIGHTS_FILE

    trained = make_trained_model(project, seed=4)
    main = np.stack([random_images(4, seed=10), random_images(4, seed=11)])  # 2 env steps of 4 envs
    p = np.stack([direct_probabilities(trained.checkpoint_path, frames) for frames in main])
    assert p.max() - p.min() > 1e-3, "a constant model would prove nothing"
    threshold = float(np.sort(p.reshape(-1))[3])
    soft = deploy(trained, reward_type="soft")
    thresholded = deploy(trained, reward_type="thresholded", threshold=threshold)
    binary = deploy(trained)  # not what RLinf's ResNet gives without reward_threshold
    local_weights = Path(default_storage.path(trained.checkpoint_path)) / WEIGHTS_FILE
    head = {"arch": "resnet18", "pretrained": "false", "hidden_dim": 16, "image_size": "[3, 32, 32]"}

    served, at_threshold, refused, wrong_kind, local = rlinf_worker(
        tmp_path,
        [
            rlinf_yaml(
                resnet_model(**head, precision="fp32") + studio_block(live_server_url, rl_token, soft.name), envs=4
            ),
            rlinf_yaml(
                resnet_model(reward_threshold=threshold) + studio_block(live_server_url, rl_token, thresholded.name),
                envs=4,
            ),
            rlinf_yaml(resnet_model() + studio_block(live_server_url, rl_token, binary.name), envs=4),
            rlinf_yaml(
                "model_type: history_vlm\nhistory_buffers: {history_window: {history_size: 2, history_keys: [main_images]}}\n"
                + studio_block(live_server_url, rl_token, soft.name),
                envs=4,
            ),
            rlinf_yaml(resnet_model(**head, precision="fp32", model_path=local_weights), envs=4),  # local files
        ],
        {"main": main},
    )

    assert served["model_class"] == STUDIO["resnet"]
    for step, expected in zip(served["steps"], p, strict=True):
        assert step["shape"] == [4, 1] and step["dtype"] == "torch.float32" and step["device"] == "cpu"
        np.testing.assert_allclose(step["rewards"], expected, atol=1e-5)  # RLinf's raw probability
    for step, expected in zip(at_threshold["steps"], p, strict=True):
        np.testing.assert_allclose(step["rewards"], np.where(expected > threshold, expected, 0.0), atol=1e-5)
    assert "needs reward_type 'soft'" in refused["error"]  # at init_worker, before any step
    assert f"history_vlm needs a vlm deployment; '{soft.name}' serves a resnet model" in wrong_kind["error"]

    assert local["model_class"] == RLINF["resnet"]  # no reward_studio block: RLinf's own class, our weights
    for step, expected in zip(local["steps"], p, strict=True):
        assert step["shape"] == [4, 1] and step["dtype"] == "torch.float32"
        np.testing.assert_allclose(step["rewards"], expected, atol=1e-5)


def _deploy_tiny_vlm(project, prompt: str):
    """A tiny Qwen3-VL registered with `prompt` and deployed; returns (model row, deployment)."""
    import uuid

    from django.core.files.storage import default_storage

    from training.models import TrainedModel
    from training.vlm.fixture import build_tiny_qwen3_vl

    name = f"checkpoints/vlm_{uuid.uuid4().hex[:8]}"
    build_tiny_qwen3_vl(default_storage.path(name))
    vlm = TrainedModel.objects.create(
        project=project, kind="vlm", name="tiny-vlm", checkpoint_path=name, config={"prompt": prompt}
    )
    return vlm, deploy(vlm)


def _history_steps() -> dict:
    """3 env steps of 3 envs: main and extra views, env 1 done at step 0, successes at steps 1 and 2."""
    rng = np.random.default_rng(5)
    return {
        "main": rng.integers(0, 256, (3, 3, 32, 32, 3), dtype=np.uint8),  # 3 steps of 3 envs
        "extra": rng.integers(0, 256, (3, 3, 1, 32, 32, 3), dtype=np.uint8),  # [B, 1 view, H, W, 3] as ManiSkill's
        "dones": np.array([[False, True, False], [False] * 3, [False] * 3]),
        "success": np.array([[False] * 3, [False, False, True], [True, False, False]]),
    }


def _history_vlm_model(hub_qwen3_vl) -> str:
    """RLinf's `reward.model` for history_vlm: its trend parser's label rewards, an interval reward, a success
    bonus and a window of 2 steps every 2 steps over both views."""
    return textwrap.dedent(
        f"""\
        model_type: history_vlm
        model_path: {hub_qwen3_vl}
        precision: fp32
        input_builder_name: qwentrend_input_builder
        reward_parser_name: qwentrend_reward_parser
        reward_parser_params: {{positive_reward: 3.0, negative_reward: -2.0, unclear_reward: 0.5, invalid_reward: -0.1}}
        interval_reward: 0.25
        gt_success_bonus: 10.0
        history_buffers:
          history_window:
            history_size: 2
            input_interval: 2
            history_keys: [main_images, extra_view_images]
        """
    )


def _check_served_window_rewards(served: dict, steps: dict, vlm, prompt: str, label_reward: dict) -> None:
    """Each served step's rewards are the label reward of the model's judgement of the window RLinf made (its
    frames found back by digest), `interval_reward` where no window, plus the success bonus."""
    from training.storage import local_path
    from training.vlm.checkpoint import checkpoint_load
    from training.vlm.labels import LABELS
    from training.vlm.scoring import ScoreItem, TrendScorer

    frames = {}
    for view in ("main", "extra"):
        for frame in steps[view].reshape(-1, 32, 32, 3):
            frames[digest(frame)] = frame
    vlm_model, processor, _ = checkpoint_load(local_path(vlm.checkpoint_path), device="cpu")
    scorer = TrendScorer(vlm_model, processor)
    assert served["steps"][0]["windows"] == {}  # RLinf's HistoryManager: nobody due at the first step
    scored = 0
    for i, step in enumerate(served["steps"]):
        assert step["shape"] == [3, 1] and step["dtype"] == "torch.float32" and step["device"] == "cpu"
        window = step["windows"].get("history_window", {"main_images": [[]] * 3, "extra_view_images": [[]] * 3})
        expected = []
        for env in range(3):
            main, extra = window["main_images"][env], window["extra_view_images"][env]
            if main and extra:
                item = ScoreItem([*(frames[d] for d in main), *(frames[d] for d in extra)], prompt)
                (probabilities,) = scorer.probabilities([item])
                expected.append(label_reward[LABELS[int(np.argmax(probabilities))]])
                scored += 1
            else:
                expected.append(0.25)
        expected = np.array(expected) + 10.0 * steps["success"][i]
        np.testing.assert_allclose(step["rewards"], expected, atol=1e-6)
    assert scored == 3  # env 0 and 2 at step 1, env 1 (reset by its done at step 0) at step 2


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inference_worker_process")
def test_rlinfs_workers_score_history_vlm_windows_with_the_deployment(
    project, rl_token, live_server_url, hub_qwen3_vl, tmp_path
):
    """RLinf's HistoryManager (in its env worker's `get_reward_model_output`) makes the windows; every env
    gets `interval_reward` where it has none (step 0: no env is due, so `history_input` is empty), the label
    reward of the deployment's judgement where it has one, plus `gt_success_bonus` where env_infos say
    success."""
    prompt = "Judge the trend."
    vlm, deployment = _deploy_tiny_vlm(project, prompt)
    steps = _history_steps()
    label_reward = {"positive": 3.0, "negative": -2.0, "unclear": 0.5}
    model = _history_vlm_model(hub_qwen3_vl)
    served, local, wrong_kind = rlinf_worker(
        tmp_path,
        [
            rlinf_yaml(
                model + studio_block(live_server_url, rl_token, deployment.name, generate=False),
                envs=3,
                reward_mode="history_buffer",
            ),
            rlinf_yaml(model, envs=3, reward_mode="history_buffer"),  # local files: RLinf's own class
            rlinf_yaml(resnet_model() + studio_block(live_server_url, rl_token, deployment.name), envs=3),
        ],
        steps,
        task="pick the cube",
        max_steps={"1": 0},
    )
    assert local["model_class"] == RLINF["history_vlm"]
    assert served["model_class"] == STUDIO["history_vlm"]
    assert f"resnet needs a resnet deployment; '{deployment.name}' serves a vlm model" in wrong_kind["error"]
    _check_served_window_rewards(served, steps, vlm, prompt, label_reward)


def digest(frame: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(frame, dtype=np.uint8).tobytes()).hexdigest()[:16]


@pytest.mark.slow
def test_rlinfs_own_ray_launch_runs_the_hook_in_the_reward_worker_process_which_stops_at_set_device(tmp_path):
    """Nothing left out: RLinf's `Cluster` starts a local Ray and launches `EmbodiedRewardWorker` in a process
    of its own; RLinf's log from that process says it imported RLINF_EXT_MODULE and called `register()`, and
    the process dies at the GPU line (this machine has no GPU)."""
    loaded = "Loaded extension module 'reward_client.rlinf_plugin' and called register()"
    yaml = "cluster: {num_nodes: 1, component_placement: {reward: all}}\n" + rlinf_yaml(
        resnet_model() + studio_block("http://127.0.0.1:9", "", "pick-cube"), envs=2
    )
    env = {**HOOK, "PYTHONPATH": client_only(tmp_path), "RLINF_LOG_LEVEL": "DEBUG"}
    result = side_run("ray_launch", 600, runner=RUNNER, env=env, yaml=yaml, log_grep=[loaded, GPU_LINE])

    assert result["launched"] and result["init_worker"].startswith("failed")
    hook_pids = {m.group(1) for line in result["log"][loaded] if (m := re.search(r"pid=(\d+)", line))}
    stop_pids = {
        m.group(1) for line in result["log"][GPU_LINE] if (m := re.search(r"EmbodiedRewardWorker pid=(\d+)", line))
    }
    assert stop_pids and stop_pids <= hook_pids, result["log"]  # the same worker process: hook, then set_device
